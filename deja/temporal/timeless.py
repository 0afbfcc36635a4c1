"""The timeless uses of the temporal bypass's words (English and Spanish): a volatile match
(:mod:`deja.temporal.volatile`) inside one of these spans does not count ("alternating
current", "how do you say 'today' in French", "open on Sundays"). Compiled by
:mod:`deja.temporal.rules`."""

from __future__ import annotations

# A mentioned (not used) word: "what does 'already' mean", "cómo se dice mañana en inglés".
_META = (
    r"\b(?:how (?:do|would|can|should|to) (?:you |i |we )?(?:say|write|spell|pronounce|"
    r"translate|use)|translat(?:e|ion of)|what does|meaning of|definition of|define|the (?:word|"
    r"term|phrase|expression|idiom|adverb|conjunction)|use|using)\s+\S+(?:\s+\S+){0,3}"
)
_META_ES = (
    r"\b(?:c[oó]mo se (?:dice|escribe|traduce|pronuncia|usa|utiliza|conjuga)|c[oó]mo (?:digo|"
    r"traduzco)|traduce|traducir|traducci[oó]n de|qu[eé] significa|significado de|la palabra|"
    r"el t[eé]rmino|la expresi[oó]n|el adverbio|uso de|usar|cu[aá]ndo se (?:escribe|usa|pone|"
    r"acent[uú]a))\s+\S+(?:\s+\S+){0,3}"
)
#: a title: capitalised words, joined by small lower-case words ("Edge of Tomorrow")
_TITLE = r"(?-i:[A-Z][\w'’.-]*)(?:\s+(?:of|the|a|an|and|de|del|la|el|en|y|(?-i:[A-Z][\w'’.-]*)))*"
_CODE_LANG = (
    r"(?:python|javascript|js|typescript|ts|java|c#|c\+\+|go|golang|rust|excel|sql|postgres|"
    r"postgresql|mysql|sqlite|bash|shell|php|ruby|pandas|numpy|r|sheets|google sheets|linux|"
    r"swift|kotlin|node|react|django|rails|powershell|vba|dart|scala|julia|matlab)"
)

#: Any character of the same sentence, but never the start of a word of today or now, so that a
#: timeless span stretched over a gap cannot hide one ("how do I know if my flight today is
#: still on time").
_GAP = (
    r"(?:(?!\b(?:today|tonight|tomorrow|now|currently|yesterday|hoy|ahora|ma[nñ]ana|ayer|"
    r"anoche|esta noche)\b)[^?.!])"
)

#: Timeless uses of the same words: a volatile match inside one of these spans does not count.
TIMELESS_PATTERNS: tuple[str, ...] = (
    # "current" as a physical quantity, a kind of account, a programming noun
    r"\b(?:alternating|direct|electric(?:al)?|eddy|ocean|sea|rip|air|jet|tidal|input|output|"
    r"leakage|bias|peak|rated|inrush|stream|gulf|humboldt|labrador|california|canary|kuroshio|"
    r"agulhas|benguela|river|convection|displacement|induced|load|drain|gate|base|collector|"
    r"emitter|dc|ac) currents?\b",
    r"\bcurrents? (?:account|accounts|density|source|sources|limit|limiting|draw|flow|loop|"
    r"transformer|sensor|divider|mirror|clamp|rating|carrying|ratio|assets?|liabilities|"
    r"gain|law|probe|meter|shunt|directory|working directory|user|branch|line|thread|process|"
    r"path|url|node|element|index|iteration|frame|scope|context|row|cell|selection)\b",
    r"\b(?:amps?|amperes?) of current\b|\bcurrent (?:in|through|across) (?:a|the) (?:wire|"
    r"circuit|resistor|coil|conductor|inductor|capacitor|diode|loop|branch)\b",
    r"\b(?:voltage|tension|resistance|power) (?:and|vs\.?|versus) current\b|\bcurrent (?:and|vs"
    r"\.?|versus) (?:voltage|resistance|power)\b|\bmeasure (?:the )?current\b",
    # the date or time as a value in code or a spreadsheet
    rf"\b(?:current|today'?s|todays) (?:date|time|datetime|timestamp|year|month|day|time ?zone)"
    rf"(?= (?:in|with|using|from) {_CODE_LANG}\b)",
    rf"\b(?:fecha|hora|a[nñ]o|mes) (?:actual|de hoy)(?= (?:en|con|usando|desde) {_CODE_LANG}\b)",
    r"\b(?:get|print|insert|format|obtain|parse|set|display|add|return|compare|store|convert)"
    r"(?:s|ting)? (?:the )?(?:current|today'?s) (?:date|time|datetime|timestamp|year|month)\b",
    r"\b(?:datetime|date|time)\.(?:now|today)\b|\bnow\(\)|\btoday\(\)",
    # "latest" / "last" / "último" as a deadline, a position or a fixed past
    r"\bat the latest\b",
    r"\b(?:the )?latest (?:possible|time|date|hour|day|moment|deadline|start|finish|check-?in|"
    r"check-?out|start time|finish time)\b",
    r"\b(?:was|were) (?:the )?(?:last|latest|most recent|newest)\b",
    r"\b(?:fue|era|fueron|eran) (?:el|la|los|las) (?:[uú]ltim[oa]s?|m[aá]s recientes?)\b",
    r"\bmost recent common ancestor\b|\blast common ancestor\b",
    r"\b(?:sort|sorted|sorting|order|ordered|ordering|ordenar|ordeno|ordena|ordenado|ordenados)"
    r"(?: \w+){0,3} (?:by|por) (?:the )?(?:newest|latest|most recent|m[aá]s recientes?|"
    r"[uú]ltim[oa]s?|m[aá]s nuev[oa]s?)\b",
    r"\b['\"`]?latest['\"`]? (?:tag|label|version tag)\b|\betiqueta ['\"`]?latest\b",
    r"\bhow (?:do|can|to|would|should) (?:i |you |we )?(?:get|show|find|see|fetch|retrieve|"
    r"select|read|print|display|list|obtain|check|access|query) (?:the )?(?:latest|newest|"
    r"most recent|last) (?:\w+ )?(?:commit|element|item|row|record|entry|line|file|value|"
    r"character|node|index|key|message|log|hash|tag|id|object|document)s?\b",
    # discourse "now", "still" as a noun or adjective
    r"^\s*now\b,?",
    r"\bnow that\b|\bfrom now on\b|\bnow and then\b|\bjust now i\b|\bnow i\b",
    r"\bstill (?:life|lifes|water|image|images|frame|frames|photo|photography|wine|alice|birth|"
    r"born|point|air)\b|\b(?:a|the|whiskey|whisky|pot|moonshine|copper) still\b|\bstand still\b|"
    r"\bsit still\b|\bkeep still\b",
    r"\bwhy (?:do|does|did|am|are|is|would|can|can't) \w+(?: \w+)? still\b",
    # "next" in code, maths and fixed texts
    r"\bnext\.?js\b|\bnext\(\)|\bnext (?:element|elements|item|items|node|nodes|pointer|number|"
    r"numbers|term|terms|prime|permutation|line|lines|page|token|tokens|character|word|"
    r"button|iteration|value|values|entry|row|record|level|step|steps|state|generation|gen|"
    r"of kin|to|door|higher|lower|greater|smaller|largest|smallest|letter|digit|index|key|"
    r"field|cell|frame|sibling|move)\b",
    r"\b(?:what|which) (?:is )?(?:comes )?next in the (?:sequence|series|pattern|list)\b|"
    r"\bthe next (?:number|term) in\b|\bin the next chapter\b|\bnext[- ]day delivery\b",
    r"\bwhat happens next in\b",
    # "yet" as a conjunction
    r"\byet another\b|\b(?:and|but) yet\b|\b\w+ yet \w+er\b",
    # titles
    r"\b(?:tomorrow never dies|edge of tomorrow|the day after tomorrow|tomorrowland|today show|"
    r"today programme|yesterday once more|el ma[nñ]ana nunca muere|al filo del ma[nñ]ana|"
    r"el d[ií]a de ma[nñ]ana|ma[nñ]ana en la batalla piensa en m[ií]|the next generation|"
    r"la pr[oó]xima generaci[oó]n|nueva generaci[oó]n|next generation)\b",
    rf"\b(?:song|novel|film|movie|book|album|musical|poem|canci[oó]n|novela|pel[ií]cula|libro|"
    rf"disco|poema|compuso|composed|sang|sings|cant[oó]|wrote|escribi[oó]|directed|dirigi[oó])"
    rf"\s+(?:the song |la canci[oó]n )?{_TITLE}",
    # a word mentioned, not used
    r"(?:^|(?<=[\s(¿¡]))['‘][^'’\n]{1,40}['’](?![a-z])",
    r"[\"“«`][^\"”»`\n]{1,60}[\"”»`]",
    _META,
    _META_ES,
    r"\bdifference between \S+ and \S+|\bdiferencia entre \S+ y \S+",
    r"\S+ (?:vs\.?|versus|or|o) \S+(?= (?:in|en) (?:english|spanish|ingl[eé]s|espa[nñ]ol)\b)",
    r"\b(?:is|es) \S+ (?:an?|un|una) (?:adverb|conjunction|verb|noun|word|preposition|adjective|"
    r"adverbio|conjunci[oó]n|verbo|sustantivo|palabra|preposici[oó]n|adjetivo)\b",
    r"\b(?:proverb|saying|idiom|expression|refr[aá]n|dicho|expresi[oó]n|frase hecha)\b[^?.!]*",
    r"\bpresent perfect\b[^?.!]*|\bpret[eé]rito perfecto\b[^?.!]*",
    r"\b\S+ y \S+ en (?:ingl[eé]s|espa[nñ]ol|franc[eé]s|alem[aá]n)\b",
    r"\b(?:days|months|d[ií]as|meses) (?:of the (?:week|year) )?(?:in|en) (?:\w+)\b",
    # "since" / "desde" with a fixed answer
    r"\bsince when\b|\bdesde cu[aá]ndo\b|\bdesde qu[eé] a[nñ]o\b",
    r"\bdesde (?:una|un) (?:fecha|d[ií]a|a[nñ]o|mes)\b|\bsince a (?:given |certain )?(?:date|"
    r"day|year|month)\b",
    # definitions
    r"^\s*¿?\s*(?:what (?:is|are) (?:an?|the concept of)|qu[eé] (?:es|son) (?:un|una|el|la|los|"
    r"las)|how (?:does|do|is|are) (?:(?:an?|the) )?[\w ]{1,30} (?:work|calculated|determined|"
    r"measured|formed)|c[oó]mo (?:funciona|funcionan|se calcula|se calculan|se determina|"
    r"se mide|se forman?|se hacen?) (?:un|una|el|la|los|las))\b[^?]{0,40}",
    # Spanish: "último" as a position, "ahora bien", "mañana" as part of the day, "ya que"
    r"\b[uú]ltim[oa]s? (?:elemento|elementos|posici[oó]n|car[aá]cter|caracteres|l[ií]nea|"
    r"l[ií]neas|paso|pasos|[ií]ndice|nodo|d[ií]gito|d[ií]gitos|palabra|palabras|cap[ií]tulo|"
    r"columna|columnas|fila|filas|[ií]tem|valor|byte|bytes|registro|letra|letras|commit|"
    r"ancestro|n[uú]mero|t[eé]rmino|rey|reina|emperador|emperatriz|fara[oó]n|zar)\b",
    r"\bahora bien\b",
    r"\b(?:if|whether) (?:\S+ ){0,4}?already (?:exists?|in|defined|declared|installed|"
    r"registered|created|open|loaded|taken|used|set)\b|\balready (?:exists?|defined|declared|"
    r"in use)\b",
    r"\b(?:si|comprobar|verificar|saber|check) (?:\S+ ){0,4}?ya (?:existe|existen|exista|"
    r"existan|est[aá]n? (?:en|definid\w*|declarad\w*|instalad\w*|registrad\w*|cread\w*|"
    r"abiert\w*|cargad\w*))\b",
    r"\bpor qu[eé] (?:\S+ ){0,3}?hace\b(?:\s+\S+){0,2}",
    r"^\s*next\b,?",
    r"\bshould (?:i|we|you) \w+ next\b",
    r"\bnews ?(?:apps?|websites?|sites?|feeds?|aggregators?|anchors?|channels?|articles?|readers?|"
    r"portals?|agenc(?:y|ies)|blogs?|outlets?|media|industry|value|writing|reporters?|"
    r"reporting|letters?|papers?|stories)\b|\b(?:fake|print|local|digital|online|tv) news\b",
    r"\bnovedad(?:es)? (?:de|del|en) (?:la )?(?:versi[oó]n )?\S*\s?v?\d+(?:\.\d+)+",
    r"\b(?:por|de|en|a) la ma[nñ]ana\b|\blas ma[nñ]anas\b|\b(?:el|del) ma[nñ]ana\b",
    r"\bvalor actual neto\b|\bvalor actual\b(?= de)",
    r"\bya (?:que|sea|sean|he|tengo|tenemos|hemos|hice|sé|instal[eé]|cre[eé]|configur[eé]|"
    r"lo s[eé]|veo)\b|\bsi ya\b",
    r"\ba[uú]n (?:m[aá]s|menos|mejor|peor|as[ií]|cuando|con|si|siendo)\b|\bni a[uú]n\b",
    r"\b(?:como|lo que|qu[eé]) siguen?\b|^\s*sigue (?:estos|los|las|este|esta|el|la)\b",
    r"\bpr[oó]xim[oa]s? (?:a|al)\b|\boriente pr[oó]ximo\b|\bpr[oó]xim[oa]s? (?:elemento|"
    r"n[uú]mero|primo|nodo|paso|t[eé]rmino|valor|[ií]ndice|car[aá]cter|letra)\b",
    r"\bqu[eé] (?:pasa|ocurre|sucede) en el (?:pr[oó]ximo|siguiente) cap[ií]tulo\b",
    r"\bahora (?:que|bien)\b",
    # a standing answer asked with a time word: how long ahead of something to act, what a
    # place does on every such day (plural), how to find out whether something still holds, an
    # amount of a thing (not its price), a place "más próximo" (nearest)
    r"\bhow (?:long|much time|many (?:hours|minutes|days|weeks)) (?:in advance |ahead )?before\b"
    rf"{_GAP}{{0,60}}?\b(?:should|must|do|does|can|need|needs|have to|has to|ought to)\b",
    r"\b(?:open|opens|closed|closes|close) (?:on|at|during|over) (?:public |bank |national |"
    r"school |religious )?(?:holidays|weekends|weekdays|sundays|mondays|tuesdays|wednesdays|"
    r"thursdays|fridays|saturdays)\b",
    rf"\b(?:est[aá]n? )?(?:abiert[oa]s?|cerrad[oa]s?|abre|abren|cierra|cierran)\b{_GAP}{{0,40}}?"
    r"(?:\b(?:los|las|todos los|todas las) (?:lunes|martes|mi[eé]rcoles|jueves|viernes|"
    r"s[aá]bados|domingos|fines de semana|festivos|d[ií]as festivos|feriados|d[ií]as laborables|"
    r"puentes)|\ben (?:festivos|fines de semana|vacaciones|d[ií]as festivos|feriados))\b",
    r"\bhow (?:do|can|would|should|to|could) (?:i |you |we |one )?(?:know|tell|check|find out|"
    rf"see|verify|confirm|determine) (?:if|whether)\b{_GAP}{{0,60}}?\bstill(?: \w+)?",
    r"\b(?:c[oó]mo|de qu[eé] (?:manera|forma)) (?:s[eé]|sabes|saber|puedo saber|se sabe|"
    rf"compruebo|comprobar|puedo comprobar|veo|distingo|reconozco) si\b{_GAP}{{0,60}}?"
    r"\b(?:sigue|siguen|todav[ií]a|a[uú]n|ya)\b(?: \w+)?",
    r"\bhow much (?:does|do|will|would|can) (?:an? |one |1 )?(?:ounce|gallon|barrel|litre|liter|"
    r"pound|kilo|cup|bag|can|tin|bucket) of \w+ (?:cover|covers|weigh|hold|contain|make|yield|"
    r"fill|serve|feed|last|produce)\b",
    r"\b(?:estaci[oó]n|parada|farmacia|hospital|cl[ií]nica|tienda|supermercado|gasolinera|"
    r"cajero|playa|aeropuerto|salida|oficina|ciudad|pueblo|hotel|restaurante|banco|comisar[ií]a|"
    r"biblioteca|escuela|colegio|estrella|planeta|galaxia)(?: de [\w ]{1,20}?)? m[aá]s "
    r"pr[oó]xim[oa]s?\b",
    # English "actual" (= real) is not Spanish "actual" (= current)
    r"\b(?:the|an|my|your|our|their|its|his|her|what|is|are|was|were|no|any|and|or)\s+actual\b",
    r"\bactual\s+(?:cost|size|value|difference|meaning|name|number|problem|reason|code|data|"
    r"result|use|purpose|time|amount|output|type|file|content|error|issue|question)s?\b",
    r"\bfalso amigo\b",
)
