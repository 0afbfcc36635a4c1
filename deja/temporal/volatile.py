"""The volatile expressions of the temporal bypass (English and Spanish): a question that
holds one outside a timeless span (:mod:`deja.temporal.timeless`) is time-dependent.
Compiled by :mod:`deja.temporal.rules`."""

from __future__ import annotations

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
