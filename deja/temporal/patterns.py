"""The temporal bypass rules as data (English and Spanish): volatile expressions, and the
timeless uses of the same words whose spans do not count. Compiled by ``deja.temporal.rules``."""

from __future__ import annotations

import re

FLAGS = re.IGNORECASE | re.UNICODE

_WEEKDAY_EN = r"(?:monday|tuesday|wednesday|thursday|friday|saturday|sunday)"
_WEEKDAY_ES = r"(?:lunes|martes|mi[eé]rcoles|jueves|viernes|s[aá]bado|domingo)"
_MONTH_EN = (
    r"(?:january|february|march|april|may|june|july|august|september|october|november|december)"
)
_MONTH_ES = (
    r"(?:enero|febrero|marzo|abril|mayo|junio|julio|agosto|septiembre|setiembre|octubre|"
    r"noviembre|diciembre)"
)
_YEAR = r"\b(?:1[0-9]{3}|20[0-9]{2})s?\b"
#: no four-digit year later in the same question (a year pins the answer down)
_NO_YEAR = rf"(?![^?]*{_YEAR})"
_PERIOD_EN = (
    r"(?:morning|afternoon|evening|night|week|weekend|month|quarter|year|season|summer|"
    r"winter|spring|autumn|fall|term|semester)"
)
_PERIOD_ES = (
    r"(?:semana|noche|ma[nñ]ana|tarde|mes|a[nñ]o|trimestre|semestre|momento|temporada|"
    r"verano|invierno|primavera|oto[nñ]o|curso|fin de semana)"
)
_OFFICE_EN = (
    r"(?:president|prime minister|pm|ceo|cfo|cto|chancellor|king|queen|pope|mayor|governor|"
    r"leader|head coach|coach|manager|secretary[- ]general|chair(?:man|woman|person)?|"
    r"speaker|monarch|world champion|reigning \w+(?: \w+)? champion|champion|number one|"
    r"no\.? ?1|richest (?:person|man|woman)|owner|boss|head of \w+|attorney general|"
    r"foreign minister|finance minister|minister of \w+|top scorer|captain)"
)
_OFFICE_ES = (
    r"(?:presidente|presidenta|primer ministro|primera ministra|ceo|consejero delegado|"
    r"consejera delegada|rey|reina|papa|alcalde|alcaldesa|gobernador|gobernadora|l[ií]der|"
    r"entrenador|entrenadora|seleccionador|seleccionadora|secretari[oa] general|director|"
    r"directora|due[nñ]o|due[nñ]a|campe[oó]n|campeona|n[uú]mero uno|persona m[aá]s rica|"
    r"hombre m[aá]s rico|mujer m[aá]s rica|m[aá]ximo goleador|canciller|ministr[oa](?: de \w+)?|"
    r"capit[aá]n|capitana)"
)

#: Expressions whose presence makes a question time-dependent.
VOLATILE_PATTERNS: tuple[str, ...] = (
    # --- English -------------------------------------------------------------------------------
    # relative dates and parts of today
    r"\b(?:today|tonight|tomorrow|yesterday)(?:'?s)?\b",
    rf"\bthis {_PERIOD_EN}(?:'s)?\b",
    r"\b(?:last|past) (?:night|week|weekend|month|quarter|year|hour|few days|season)\b",
    rf"\b(?:on|this|last|next|since|until|till) {_WEEKDAY_EN}\b(?!s)",
    r"\b(?:right|just) now\b|\bnow\b|\bcurrent(?:ly)?\b",
    r"\bat (?:the|this) (?:moment|minute|time)\b",
    r"\bat present\b|\bpresently\b",
    r"\blatest\b|\bnewest\b|\bmost recent\b|\brecent(?:ly)?\b|\bup[- ]to[- ]date\b",
    r"\bso far\b|\bto date\b|\bas of\b(?!\s+(?:\d|" + _MONTH_EN + r"))|\bthese days\b|"
    r"\bnowadays\b|\byear[- ]to[- ]date\b|\bytd\b",
    r"\b(?:breaking|live) (?:news|score|scores|updates?|coverage)\b",
    # the time or the date itself
    r"\bwhat time is it\b|\bwhat(?:'s|s| is) the time\b(?!\s+(?:complexity|zone|difference|"
    r"signature|value|period|limit|constant|step|frame|series|of\b))|\btell me the time\b",
    r"\bwhat(?:'s|s| is) (?:the |today'?s )?date\b(?!\s+(?:of|when|on which|for|that)\b)",
    r"\b(?:what|which) (?:day|date|month|year|week|season)(?: of the (?:week|month|year))? "
    r"(?:is it|are we in|is today)\b",
    r"\bhow late is it\b|\bis it (?:daylight saving|summer time|dst|the weekend)\b",
    # what comes next
    r"\bnext\b|\bupcoming\b|\bforthcoming\b",
    r"\b(?:coming (?:out |up )?|out |released |launching |arriving )soon\b",
    # has it happened yet
    r"(?:^|[¿?.!,;:]\s*)(?:has|have|had|is|are|was|were|did|does|do)(?:n't)?\b[^.?!;]{0,80}?"
    r"\b(?P<w>yet|already)\b",
    r"\b(?:yet|already)\s*\?",
    # change since a point in time
    rf"\bsince (?:yesterday|today|this \w+|last \w+|the (?:weekend|morning|start|beginning|"
    rf"last \w+)|my last|our last|your last|{_WEEKDAY_EN}|{_MONTH_EN}\b(?!\s+\d{{4}})|"
    r"noon|midnight|lunch|breakfast|\d{1,2} ?(?:am|pm|o'clock))\b",
    r"\b(?:has|have|had)\b[^.?!]{0,80}\b(?P<w>since)\b"
    r"(?!\s+(?:when|then|ancient|antiquity|the dawn|"
    r"its (?:founding|creation|inception)|independence|python|version|v?\d|the '?\d|"
    r"the (?:\w+ )?(?:century|renaissance|revolution|war|treaty|fall|collapse|invention|"
    r"discovery|founding|big bang|middle ages|ice age|dawn)))",
    # current state
    r"(?:^|[¿?.!,;:]\s*)(?:is|are|was|were|does|do|did|has|have|can|will)(?:n't)? "
    r"[^.?!;]{0,60}?\b(?P<w>still)\b",
    r"\bstill (?:open|closed|down|valid|available|running|ongoing|on|in effect|alive|"
    r"suspended|going on|the)\b",
    # prices and rates
    r"\b(?:stock|share) price\b|\btrading at\b|\btrades at\b|\bmarket cap\b",
    r"\bprice of (?:an? )?(?:gold|silver|oil|bitcoin|btc|ethereum|eth|gas|petrol|diesel|brent|"
    r"crude|copper|wheat|[\w.]+ (?:stock|shares))\b",
    r"\b(?:bitcoin|btc|ethereum|eth|dogecoin|solana|gold|silver|oil|brent|crude|gas|petrol) "
    r"(?:price|worth|value|trading)\b",
    r"\bhow much (?:is|are|does|do) (?:an? |one |1 )?(?:bitcoin|btc|ethereum|eth|gold|silver|"
    r"(?:an? )?(?:ounce|gallon|barrel|litre|liter) of \w+)\b|\bhow much is [\w .'-]{1,30} worth\b",
    r"\bwhat(?:'s|s| is) the [\w /-]{0,30}?\b(?:exchange|interest|mortgage|inflation|"
    r"unemployment|fed funds|base|prime|discount|repo|savings|deposit|lending|borrowing|"
    r"conversion|spot|jobless|policy|bank) rates?\b(?!\s+(?:formula|calculation|definition|"
    r"mean|work|parity))|\bwhat(?:'s|s| is) the price of\b",
    r"\b\d+(?:[.,]\d+)? ?(?:usd|eur|gbp|jpy|mxn|dollars?|euros?|pounds?|yen|pesos?) (?:in|to) "
    r"(?:usd|eur|gbp|jpy|mxn|dollars?|euros?|pounds?|yen|pesos?)\b",
    # scores and results
    rf"\bwho won\b{_NO_YEAR}(?![^?]*\b(?:first|inaugural|battle|war|revolution)\b)",
    rf"\bwhat(?:'s|s| is| was) the score\b{_NO_YEAR}|\bfinal score\b{_NO_YEAR}",
    rf"\bdid [\w .'-]{{1,30}} (?:win|lose|draw|qualify|beat)\b{_NO_YEAR}",
    r"\bhow did (?:the )?[\w .'-]{1,30} do\b(?=\s*(?:\?|$|last|yesterday|today|tonight|in the))",
    r"\bwho(?:'s| is) (?:winning|leading|ahead|top of)\b|\bis winning\b",
    rf"\b(?:election|match|game|race|vote|referendum) results?\b{_NO_YEAR}",
    rf"\bresults? of the [\w ]{{0,20}}(?:election|match|game|race|vote|referendum)\b{_NO_YEAR}",
    # weather
    r"\bweather\b(?!\s+(?:app|api|station|balloon|satellites?|model|data|map|system|front|"
    r"vane|forecasting|patterns?|instruments?|services?))|\bwhat(?:'s|s| is) the forecast\b|"
    r"\b(?:today'?s|tomorrow'?s|weekend|local|weather) forecast\b",
    r"\bwhat(?:'s|s| is) the (?:temperature|humidity|uv index|air quality|pollen count|"
    r"wind(?: speed)?)\b(?!\s+(?:of|at which|scale|for (?:baking|cooking)))",
    r"\bhow (?:hot|cold|warm|windy|humid|sunny|rainy|chilly) is it\b",
    r"\b(?:is it|will it) (?:going to |gonna )?(?:rain|snow|hail|be (?:sunny|hot|cold|windy|"
    r"warm|rainy|cloudy))\b",
    r"\b(?:do|should|will) (?:i|we) (?:need|take|bring) (?:an? )?(?:umbrella|coat|jacket|"
    r"raincoat|sunscreen)\b",
    r"\b(?:storm|weather|flood|heat|snow) (?:warning|alert|watch)s?\b",
    # news
    r"\bnews\b|\bheadlines\b|\btop (?:headline|stories)\b|\btrending\b|\bbrief me\b|"
    r"\banything new\b",
    r"\b(?:any )?updates? on\b|\bwhat(?:'s|s| is) (?:happening|going on)\b",
    rf"\bwhat happened with\b{_NO_YEAR}|\bwhat(?:'s|s| is) happening (?:with|in|at)\b",
    r"\bwhat are people saying\b",
    # open or closed now
    r"\b(?:is|are) (?:the |my |our )?[\w' .&-]{1,40}? (?:open|closed|down|up|up and running|"
    r"operating|operational)\s*[?.!]*\s*$|\b(?:is|are) [\w' .&-]{1,40}? having (?:issues|"
    r"problems|an outage|outages)\b",
    r"\b(?:open|closed) (?:near me|nearby|late|on \w+)\b|\bopen to traffic\b",
    # who holds a post now
    rf"\bwho(?:'s| is| are) (?:the )?(?:current |reigning |sitting |incumbent )?"
    r"(?:(?!first|founding|former|last|next|the\b)[\w.-]+ ){0,2}?"
    rf"{_OFFICE_EN}"
    r"\b(?![^?]*\b(?:novel|book|film|movie|series|episode|play|musical|fiction)\b)",
    r"\bwho (?:coaches|runs|leads|owns|manages|chairs|heads|captains|governs)\b",
    r"\bwho holds the\b[^?]*\brecords?\b",
    # countdowns and ages relative to now
    r"\bhow (?:many|much) (?:\w+ )?(?:days|weeks|months|hours|minutes|seconds|sleeps|years|time)"
    r" (?:until|till|til|left|to go|remain|before|are left|is left|ago)\b",
    r"\bhow long (?:until|till|til|before|to go|is left|ago)\b|\b(?:days?|weeks?) (?:until|till)"
    r"\b|\bhow long has it been\b|\bhow many years has it been\b",
    r"\bhow old (?:is|are)\b(?!\s+(?:the )?(?:universe|earth|sun|moon|solar system|milky way|"
    r"galaxy|dinosaurs?)\b)(?!\s+considered)|\bwhat age is\b(?!\s+(?:considered|required|"
    r"needed|the (?:minimum|legal|average|maximum|best|right)))",
    r"\bhow (?:many years|long) (?:has|have) [\w .'-]{1,40} (?:been|existed|lived|reigned|"
    r"ruled|served|worked)\b",
    # --- Spanish -------------------------------------------------------------------------------
    r"\bhoy\b|\bahora\b|\bactualmente\b|\bactual(?:es)?\b",
    r"\ben (?:este|estos) moment(?:o|os)\b",
    r"\b[uú]ltim[oa]s?\b|\bm[aá]s nuev[oa]s?\b",
    r"\bm[aá]s recientes?\b|\brecientemente\b|\brecientes?\b",
    r"\bayer\b|\banoche\b|\bma[nñ]ana\b",
    rf"\best[ae] {_PERIOD_ES}\b",
    r"\bhasta (?:ahora|la fecha|el momento)\b|\b(?:en vivo|en directo)\b",
    rf"\b(?:el|este|pr[oó]ximo|desde el|hasta el) {_WEEKDAY_ES}\b(?!s)",
    r"\b(?:el|para el|desde el) fin de semana\b",
    r"\ben lo que va de(?:l| la)? (?:a[nñ]o|mes|semana|temporada|trimestre|d[ií]a|curso|siglo)\b",
    # the time or the date itself
    r"\bqu[eé] hora es\b|\bdime la hora\b|\bla hora (?:actual|exacta)\b",
    r"\bqu[eé] d[ií]a (?:de la semana )?es\b(?!\s+(?:el|la|los|las)\b)",
    r"\ba qu[eé] (?:fecha|d[ií]a) estamos\b|\ba cu[aá]ntos estamos\b",
    r"\ben qu[eé] (?:a[nñ]o|mes|d[ií]a|fecha|semana|estaci[oó]n|trimestre) estamos\b",
    r"\bestamos en horario de (?:verano|invierno)\b|\bqu[eé] fecha es\b",
    # what comes next
    r"\bpr[oó]xim[oa]s?\b|\bpr[oó]ximamente\b",
    r"\bcu[aá]ndo (?:es|son|sale|salen|pasa|juega|llega|ser[aá]|empieza|abre|hay) (?:el|la|los|"
    r"las) (?:siguientes?|pr[oó]xim[oa]s?)\b",
    r"\b(?:el|la) siguiente (?:festivo|partido|reuni[oó]n|tren|autob[uú]s|vuelo|lanzamiento|"
    r"evento|episodio|concierto|elecci[oó]n|sorteo|eclipse|puente|jornada|carrera)\b",
    r"\b(?:estrena|estrenan|sale|salen|llega|llegan|lanza|lanzan|abre|abren) (?:muy )?pronto\b",
    # has it happened yet / still
    r"\bya\b|\btodav[ií]a\b|\ba[uú]n\b",
    r"\bsiguen?\b",
    r"^\s*¿?\s*contin[uú]an?\b|\b(?:est[aá]n?|sigue|siguen) vigentes?\b",
    # change since a point in time
    rf"\bdesde (?:ayer|anoche|hoy|esta \w+|este \w+|el {_WEEKDAY_ES}|la semana pasada|"
    rf"el (?:mes|a[nñ]o|fin de semana|trimestre|verano|invierno) pasado|el fin de semana|"
    rf"(?:mi|tu|su|nuestra|nuestro|el|la) [uú]ltim[oa]|principios de (?:a[nñ]o|mes|semana)|"
    rf"hace \w+|las \d{{1,2}}|{_MONTH_ES}\b(?!\s+de\s+\d{{4}}))",
    r"\b(?:ha|han|has|hemos|hab[eé]is)\s+\w+(?:ado|[ií]do|to|cho|sto)\b[^.?!]{0,60}\b(?P<w>desde)\b"
    r"(?!\s+(?:cu[aá]ndo|qu[eé]|el a[nñ]o|\d|la (?:antig|edad|prehist)|siempre))",
    # prices and rates
    r"\ba (?:cu[aá]nto|c[oó]mo) (?:est[aá]n?|cotiza|cotizan|se cotiza|se paga|va|van)\b",
    r"\bcu[aá]nto (?:cotiza|cotizan|vale|valen)\b",
    r"\bcu[aá]nto (?:cuesta|cuestan) (?:el|la|un|una) (?:litro|barril|onza|gramo|kilo|gasolina|"
    r"gas[oó]leo|di[eé]sel|luz|bitcoin|acci[oó]n|d[oó]lar|euro)\b",
    r"\bprecios? (?:del?|de la|de los) (?:d[oó]lar|euro|oro|plata|petr[oó]leo|bitcoin|ethereum|"
    r"luz|gasolina|gas[oó]leo|di[eé]sel|brent|barril|bolsa|acci[oó]n|acciones|vivienda|"
    r"alquiler|gas|cobre|trigo|megavatio|kwh)\b",
    r"\b(?:cotizaci[oó]n|cambio) (?:del?|de la) (?:d[oó]lar|euro|peso|yen|libra|bitcoin|yuan)\b",
    r"\beur[ií]bor\b",
    r"\bcu[aá]l es (?:el|la) (?:tipo de (?:inter[eé]s|cambio)|inflaci[oó]n|tasa de \w+|ipc|"
    r"prima de riesgo|precio|cotizaci[oó]n)\b",
    r"\b\d+(?:[.,]\d+)? ?(?:d[oó]lares|euros|libras|yenes|pesos)(?: \w+)? en (?:d[oó]lares|"
    r"euros|libras|yenes|pesos)\b",
    # scores and results
    rf"\bqui[eé]n gan[oó]\b{_NO_YEAR}(?![^?]*\b(?:primer|guerra|batalla|revoluci[oó]n))",
    r"\bqui[eé]n (?:va ganando|gana|lidera|va primero|va l[ií]der|encabeza)\b|\bva l[ií]der\b",
    r"\bc[oó]mo (?:qued[oó]|ha quedado|va|van|acab[oó]|termin[oó]|ha terminado) (?:el|la|los|"
    rf"las) (?:partido|clasificaci[oó]n|carrera|final|marcador|elecciones|cl[aá]sico|derbi|"
    rf"votaci[oó]n|liga|eliminatoria)\b{_NO_YEAR}",
    rf"\bresultados? (?:del?|de la|de las|de los) (?:partido|elecciones|carrera|votaci[oó]n|"
    rf"sorteo|loter[ií]a|final|derbi|cl[aá]sico|encuentro)\b{_NO_YEAR}",
    r"^\s*¿?\s*(?:gan[oó]|perdi[oó]|empat[oó])\b|\bcu[aá]nto qued[oó]\b",
    # weather
    r"\bqu[eé] (?:tiempo|temperatura) (?:hace|har[aá]|va a hacer|hay)\b(?! falta)",
    r"\bhace (?:calor|fr[ií]o|sol|viento|bueno|malo|buen tiempo|mal tiempo)\b",
    r"\b(?:va|van) a (?:llover|nevar|granizar|hacer (?:calor|fr[ií]o|sol|viento))\b",
    r"\b(?:llover[aá]|nevar[aá]|granizar[aá]|har[aá] (?:sol|calor|fr[ií]o|viento|buen tiempo|"
    r"mal tiempo))\b",
    r"\bpron[oó]stico del tiempo\b|\bprevisi[oó]n (?:del tiempo|meteorol[oó]gica)\b",
    r"\bnecesito (?:un |el )?paraguas\b|\balertas? (?:por|de) (?:tormentas?|calor|lluvias?|"
    r"nieve|viento|inundaciones)\b",
    r"\bc[oó]mo est[aá] (?:el|la) (?:mar|tiempo|calidad del aire|tr[aá]fico|carretera|clima|"
    r"nieve|bolsa)\b",
    r"\bcu[aá]l es el [ií]ndice uv\b",
    # news
    r"\bnoticias?\b|\btitulares\b|\bnovedad(?:es)?\b|\bactualidad\b|\btendencia\b",
    r"\bqu[eé] (?:est[aá]|ha) pasa(?:ndo|do)\b|\bqu[eé] pasa con\b|\ben qu[eé] qued[oó]\b",
    r"\balguna actualizaci[oó]n\b|\bqu[eé] se sabe (?:de|del|sobre)\b|\balgo nuevo\b",
    # open or closed now
    r"\best[aá]n? (?:abiert[oa]s?|cerrad[oa]s?|ca[ií]d[oa]s?|cortad[oa]s?|operativ[oa]s?|"
    r"colapsad[oa]s?)\b",
    r"\babiert[oa]s? (?:cerca|ahora|hoy|ya|esta)\b|\b(?:restaurantes|farmacias|tiendas|bares|"
    r"supermercados|gasolineras) abiert[oa]s\b|\bde guardia\b",
    r"^\s*¿?\s*funciona(?:n)? (?:el|la|los|las)\b",
    # who holds a post now
    rf"\bqui[eé]n es (?:el|la) (?:actual )?{_OFFICE_ES}\b"
    r"(?![^?]*\b(?:novela|libro|pel[ií]cula|serie|episodio|obra)\b)",
    r"\bqui[eé]n (?:entrena|dirige|gobierna|preside|lidera|manda en|tiene el r[eé]cord)\b",
    # countdowns and ages relative to now
    r"\bcu[aá]nt[oa]s? (?:(?:d[ií]as|semanas|meses|horas|minutos|segundos|a[nñ]os|noches|"
    r"tiempo) )?(?:faltan?|quedan?)\b",
    r"\bhace cu[aá]nt[oa]s?\b|\bcu[aá]nt[oa]s? (?:\w+ )?hace (?:que|de|desde)\b",
    r"\bcu[aá]ntos a[nñ]os (?:tiene|tienen|cumple|cumplen|lleva|llevan|hace)\b(?!\s+(?:que|un|"
    r"una)\b)(?!\s+(?:el|la) (?:universo|tierra|sol|luna|sistema solar|v[ií]a l[aá]ctea)\b)",
    r"\bqu[eé] edad (?:tiene|tienen)\b(?! que)|\bcu[aá]nto tiempo (?:lleva|llevan|hace)\b",
    # the state of things right now, asked without a time word (markets, traffic, disruptions)
    r"\b(?:is it|will it|is there) (?:raining|snowing|rain|snow|storming|hailing|"
    r"windy|sunny|foggy|cloudy)\b(?! cats)|"
    r"\b(?:est[aá]|va a estar) (?:lloviendo|nevando|nublado)\b",
    r"\bhow (?:is|are) (?:the )?(?:stock market|markets?|economy|dow|nasdaq|s&p(?: 500)?|"
    r"ftse|dax|ibex|nikkei|crypto(?: market)?|housing market|traffic|weather)(?: \w+)? doing\b",
    r"\bc[oó]mo (?:va|van|est[aá]|est[aá]n) (?:la bolsa|las bolsas|el mercado|los mercados|"
    r"el ibex|el tr[aá]fico|el tiempo|la econom[ií]a)\b",
    r"\b(?:traffic|tailbacks?) (?:like |jam |jams )?(?:on|in|at|near|around) (?:the )?"
    r"[\w-]{2,}|\b(?:jammed|congested|gridlocked)\b|\bhay (?:tr[aá]fico|atasco|atascos|"
    r"retenciones)\b|\bhay (?:alg[uú]n |alguna |algunos |algunas )?(?:retrasos?|huelgas?|"
    r"cancelaciones|cortes|incidencias|aver[ií]as) (?:en|de|del|con|para)\b|"
    r"\b(?:are there|is there|any) (?:any |an? )?(?:delays?|disruptions?|cancell?ations?|"
    r"closures?|outages?|strikes?) (?:on|at|to|from|in|with|for|affecting)\b",
    r"\b(?:playing|showing) (?:in|at) (?:the )?(?:theaters?|theatres?|cinemas?)\b|"
    r"\ben cartelera\b",
)

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
