"""Write ``questions.jsonl``: hand-written volatile and timeless questions, English and Spanish.

Each block below is one category in one language, one question per line. The split is
stratified by (lang, category, volatile) with a fixed seed; questions whose normalised word sets
overlap strongly are grouped first so that a near-copy never lands on the other side of the split.
Once written, a row keeps its split: rerunning after adding questions splits only the new ones
(``--resplit`` starts over).

    python training/temporal/build_dataset.py [--out training/temporal/questions.jsonl]
"""

from __future__ import annotations

import argparse
import json
import random
import re
import unicodedata
from pathlib import Path

SEED = 20261201
TEST_SHARE = 0.3
NEAR_COPY_JACCARD = 0.6

# (category, volatile, lang) -> one question per line
DATA: dict[tuple[str, bool, str], str] = {}


def block(category: str, volatile: bool, lang: str, text: str) -> None:
    DATA[(category, volatile, lang)] = text


# ============================== volatile ==============================

block(
    "relative_date",
    True,
    "en",
    """
What's on my calendar today?
is it going to rain tomorrow
What did the Fed announce yesterday?
Which pharmacies are on duty tonight?
what are today's top headlines
Any delays on the Northern line today?
what's the lunch menu for tomorrow
Who played in yesterday's final?
Do I have any meetings tomorrow morning?
What's the traffic like on the M25 today
summarise yesterday's sales numbers
WHAT IS TODAY'S SPECIAL
Are schools closed tomorrow because of the snow?
""",
)
block(
    "relative_date",
    True,
    "es",
    """
¿Qué tengo en la agenda hoy?
va a llover mañana en sevilla
¿Qué anunció ayer el Banco Central Europeo?
¿Qué farmacias están de guardia esta noche?
titulares de hoy
¿Hay retrasos en el metro hoy?
¿Cuál es el menú de mañana en el comedor?
¿Quién jugó la final de ayer?
¿Tengo reuniones mañana por la mañana?
como esta el trafico hoy en la M-30
resumen de las ventas de ayer
¿Qué pasó anoche en el Congreso?
¿Abren los colegios mañana con la nevada?
""",
)

block(
    "next_event",
    True,
    "en",
    """
When is the next SpaceX launch?
What's Arsenal's next Champions League match?
upcoming concerts in Berlin
When's the next full moon?
When does the next train to Brighton leave?
What are the upcoming public holidays?
Who do the Lakers play next?
When is the next Apple event?
Is there an upcoming election in Canada?
when is the next bus to the airport
What movies are coming out soon?
Any upcoming maintenance windows for the database?
When's the next Fed meeting?
""",
)
block(
    "next_event",
    True,
    "es",
    """
¿Cuándo es el próximo lanzamiento de SpaceX?
¿Cuál es el próximo partido del Betis?
proximos conciertos en Madrid
¿Cuándo es la próxima luna llena?
¿A qué hora sale el próximo tren a Valencia?
¿Cuál es el siguiente festivo?
¿Contra quién juega el Madrid la próxima jornada?
¿Cuándo son las próximas elecciones generales?
cuando pasa el proximo autobus al aeropuerto
¿Qué películas se estrenan pronto?
¿Hay alguna ventana de mantenimiento programada próximamente?
¿Cuándo es el próximo puente?
¿Cuándo es la siguiente reunión del BCE?
""",
)

block(
    "happened_yet",
    True,
    "en",
    """
Has the new iPhone been released yet?
Did the package arrive already?
Has the Fed cut rates yet?
Is GTA 6 out yet?
Have they announced the Oscar nominees yet?
has the election been called already
Did the build finish yet?
Has my refund been processed yet?
Has season 3 dropped yet?
Is the bridge reopened yet?
Have the exam results come out already?
Did Spain already qualify for the World Cup?
""",
)
block(
    "happened_yet",
    True,
    "es",
    """
¿Ya salió el nuevo iPhone?
¿Ha llegado ya el paquete?
¿Ya bajó los tipos el BCE?
¿Ya se puede comprar el GTA 6?
¿Se anunciaron ya los nominados a los Goya?
ya terminó el despliegue?
¿Todavía no han publicado las notas de selectividad?
¿Aún no ha salido la tercera temporada?
¿Ya abrieron el puente?
¿Ya me devolvieron el dinero?
¿España ya está clasificada para el Mundial?
¿Ha terminado ya la votación?
""",
)

block(
    "time_date_itself",
    True,
    "en",
    """
What time is it?
what time is it in Tokyo
What day is it?
what's the date
What is the date today?
Which day of the week is it?
what year is it
Is it daylight saving time in New York right now?
What's the time in UTC?
what month are we in
Tell me the time.
What's the time in Sydney?
whats todays date
""",
)
block(
    "time_date_itself",
    True,
    "es",
    """
¿Qué hora es?
que hora es en Tokio
¿Qué día es hoy?
¿A qué fecha estamos?
¿Cuál es la fecha de hoy?
¿Qué día de la semana es?
¿En qué año estamos?
¿En qué mes estamos?
dime la hora
¿Qué hora es en Nueva York?
¿Estamos en horario de verano?
¿A cuántos estamos?
Que dia es
""",
)

block(
    "change_since",
    True,
    "en",
    """
How much has Bitcoin moved since last week?
What changed in the repo since Monday?
How many new cases since yesterday?
Has anything happened since this morning?
How has the euro performed since January?
What's new since my last login?
How much has the S&P gained since the start of the year?
Which tickets were opened since Friday?
Has the rate changed since last month?
what has happened in Ukraine since the weekend
how far has the stock fallen since the earnings call
""",
)
block(
    "change_since",
    True,
    "es",
    """
¿Cuánto ha subido el bitcoin desde la semana pasada?
¿Qué ha cambiado en el repositorio desde el lunes?
¿Cuántos casos nuevos hay desde ayer?
¿Ha pasado algo desde esta mañana?
¿Cómo ha evolucionado el euro desde enero?
¿Qué novedades hay desde mi último acceso?
¿Cuánto ha ganado el IBEX en lo que va de año?
¿Qué incidencias se abrieron desde el viernes?
¿Ha cambiado el tipo de interés desde el mes pasado?
que ha pasado desde el fin de semana
¿Cuánto ha caído la acción desde la presentación de resultados?
""",
)

block(
    "current_state",
    True,
    "en",
    """
Is Biden still president?
Is the road over the pass still closed?
Is Twitter still called X?
Are the strikes still going on in France?
Is the promo code still valid?
As of today, how many countries use the euro?
Is Messi still playing in Miami?
Does the store still have the PS5 in stock?
is the outage still ongoing
Is the hiring freeze still in effect?
Is he still the coach of Barcelona?
Are flights to Tel Aviv still suspended?
""",
)
block(
    "current_state",
    True,
    "es",
    """
¿Sigue siendo Sánchez presidente del Gobierno?
¿Sigue cortada la carretera del puerto?
¿Todavía funciona el código de descuento?
¿Siguen las huelgas en Francia?
¿Sigue jugando Messi en Miami?
¿Aún queda stock de la PS5?
sigue caido el servicio?
¿Continúa la congelación de contrataciones?
¿Sigue siendo Ancelotti el entrenador del Madrid?
¿Siguen suspendidos los vuelos a Tel Aviv?
¿Está vigente todavía la alerta por calor?
a dia de hoy cuantos paises usan el euro
""",
)

block(
    "this_period",
    True,
    "en",
    """
What are our sales targets this quarter?
Which team is top of the table this season?
What's the theme of this year's Met Gala?
How much have I spent this month?
What are the trending songs this week?
who's hosting the Oscars this year
What's on at the cinema this weekend?
How many goals has Haaland scored this season?
What are the best-selling books this season
what festivals are on this summer
How is revenue tracking for the quarter so far?
""",
)
block(
    "this_period",
    True,
    "es",
    """
¿Cuáles son los objetivos de ventas este trimestre?
¿Quién va líder de la liga esta temporada?
¿Cuánto he gastado este mes?
¿Qué canciones son tendencia esta semana?
¿Quién presenta los Goya este año?
¿Qué hay en el cine este fin de semana?
¿Qué festivales hay este verano?
libros mas vendidos esta temporada
¿Cuántos goles lleva Lewandowski esta temporada?
¿Cuál es el lema del Orgullo de este año?
¿Cuánto hemos facturado en lo que va de trimestre?
""",
)

block(
    "latest",
    True,
    "en",
    """
What is the latest version of Python?
What's the newest MacBook?
latest news on the strike
What is the most recent Marvel movie?
What's Taylor Swift's latest album?
What was in the latest Windows update?
Show me the newest posts in the forum
Which is the latest Android release?
What did the most recent jobs report say?
what's new in the newest Chrome release
Give me the latest polls for the election
""",
)
block(
    "latest",
    True,
    "es",
    """
¿Cuál es la última versión de Python?
¿Cuál es el MacBook más nuevo?
últimas noticias de la huelga
¿Cuál es la película más reciente de Marvel?
¿Cuál es el último disco de Rosalía?
¿Qué trae la última actualización de Windows?
¿Cuál es la versión de Android más reciente?
¿Qué dijo el último dato de paro?
novedades de la ultima version de chrome
¿Cuáles son las últimas encuestas electorales?
¿Cuál es el modelo más nuevo de Samsung?
""",
)

block(
    "prices_rates",
    True,
    "en",
    """
What's Apple's stock price?
How much is Bitcoin worth?
What's the euro to dollar exchange rate?
price of gold per ounce
How much is a gallon of gas in California?
What's the fed funds rate?
What is Tesla trading at?
what is 100 USD in yen
What's the mortgage rate for a 30-year fixed?
How much does an ounce of silver cost
What's the price of Brent crude?
What's the inflation rate in the US?
how much is ethereum
""",
)
block(
    "prices_rates",
    True,
    "es",
    """
¿A cuánto está el dólar?
precio del bitcoin
¿Cuánto cotiza Inditex?
¿A cuánto está el euro frente a la libra?
¿Cuánto cuesta la gasolina en España?
¿Cuál es el euríbor?
¿Cuál es el precio del oro?
cuanto son 100 dolares en pesos mexicanos
¿Cuál es el tipo de interés del BCE?
¿A cuánto está el barril de Brent?
¿Cuál es la inflación en Argentina?
precio de la luz por horas
¿Cuánto vale un ethereum?
""",
)

block(
    "scores_results",
    True,
    "en",
    """
Who won last night's game?
What was the score of the Lakers game?
Did Real Madrid win?
Who won the Grand Prix on Sunday?
What's the score in the cricket?
results of the local election
how did the Yankees do
Who is leading the Tour de France?
Did Alcaraz win his match?
Final score Arsenal Chelsea?
Who is winning the match?
""",
)
block(
    "scores_results",
    True,
    "es",
    """
¿Quién ganó anoche?
¿Cómo quedó el partido del Barça?
resultado del partido del Madrid
¿Ganó Alcaraz?
¿Quién ganó el Gran Premio el domingo?
¿Cómo va el partido?
¿Quién lidera el Tour?
resultados de las elecciones municipales
¿Cuánto quedó el Atleti?
¿Quién va ganando el clásico?
¿Cómo ha quedado la clasificación de la Liga?
""",
)

block(
    "weather",
    True,
    "en",
    """
What's the weather in London?
Is it going to snow this weekend?
Do I need an umbrella?
What's the temperature in Chicago?
How hot is it outside?
Will it be sunny on Saturday?
weather forecast for Paris
Is there a storm warning for Florida?
what's the UV index
How windy is it at the beach?
What's the air quality in Delhi?
""",
)
block(
    "weather",
    True,
    "es",
    """
¿Qué tiempo hace en Bilbao?
¿Va a nevar el fin de semana?
¿Necesito paraguas?
¿Qué temperatura hace en Sevilla?
¿Hace calor fuera?
¿Hará sol el sábado?
pronostico del tiempo para Barcelona
¿Hay alerta por tormentas en Valencia?
¿Cuál es el índice UV?
¿Cómo está el mar en Tarifa para surfear?
¿Cómo está la calidad del aire en Madrid?
""",
)

block(
    "news",
    True,
    "en",
    """
What's in the news?
Any news about the merger?
What's happening in the world?
Top headlines
What happened with the Boeing investigation?
Any updates on the hurricane?
What's going on with the strike at the port?
What are people saying about the new tax bill?
Brief me on the markets
what's trending on Twitter
Is there anything new about the data breach?
""",
)
block(
    "news",
    True,
    "es",
    """
¿Qué hay de nuevo en las noticias?
¿Hay novedades sobre la fusión?
¿Qué está pasando en el mundo?
titulares principales
¿En qué quedó la investigación de Boeing?
¿Alguna actualización sobre el huracán?
¿Qué pasa con la huelga del puerto?
¿Qué es tendencia en Twitter?
¿Hay algo nuevo sobre la filtración de datos?
resumen de la actualidad
¿Qué se sabe del incendio de Tenerife?
""",
)

block(
    "open_now",
    True,
    "en",
    """
Is the pharmacy on Main Street open?
Is Costco open right now?
Is the Louvre open today?
Is the pool open?
Is the Golden Gate Bridge open to traffic?
Is Gmail down?
Is the bakery still open?
What restaurants are open near me?
Is the post office closed?
Is the border crossing open at the moment?
Is AWS us-east-1 having issues?
""",
)
block(
    "open_now",
    True,
    "es",
    """
¿Está abierta la farmacia de la calle Mayor?
¿Está abierto Mercadona?
¿Abre hoy el Prado?
¿Está abierta la piscina?
¿Está cortado el túnel?
¿Está caído WhatsApp?
¿Sigue abierta la panadería?
restaurantes abiertos cerca
¿Está cerrada la oficina de correos?
¿Está operativo el aeropuerto de Barajas?
¿Funciona el metro?
""",
)

block(
    "current_holder",
    True,
    "en",
    """
Who is the president of France?
Who is the CEO of Twitter?
Who's the UK prime minister?
Who is the reigning world chess champion?
Who is the richest person in the world?
Who coaches Manchester United?
Who's number one in the ATP rankings?
Who is the Secretary-General of the UN?
Who is the Pope?
who runs OpenAI
Who holds the 100m world record?
""",
)
block(
    "current_holder",
    True,
    "es",
    """
¿Quién es el presidente de Francia?
¿Quién es el CEO de Twitter?
¿Quién es el primer ministro británico?
¿Quién es el campeón del mundo de ajedrez?
¿Quién es la persona más rica del mundo?
¿Quién entrena al Manchester United?
¿Quién es el número uno del ranking ATP?
¿Quién es el secretario general de la ONU?
¿Quién es el Papa?
quien es el alcalde de Madrid
¿Quién tiene el récord de los 100 metros?
""",
)

block(
    "countdown",
    True,
    "en",
    """
How many days until Christmas?
How long until the weekend?
How many days left until my birthday on 3 May?
how many weeks until summer
How long till New Year?
How many days are left in the year?
When is Easter this year?
How many hours until the launch?
How many sleeps until Christmas
How long until the World Cup starts?
How many days ago was the election?
""",
)
block(
    "countdown",
    True,
    "es",
    """
¿Cuántos días faltan para Navidad?
¿Cuánto queda para el fin de semana?
¿Cuántos días quedan para mi cumpleaños?
cuantas semanas faltan para el verano
¿Cuánto falta para Nochevieja?
¿Cuántos días quedan del año?
¿Cuándo cae Semana Santa este año?
¿Cuántas horas faltan para el lanzamiento?
¿Cuánto falta para el Mundial?
¿Hace cuántos días fueron las elecciones?
cuantos dias faltan para reyes
""",
)

block(
    "age_now",
    True,
    "en",
    """
How old is Taylor Swift?
How old is the King of Spain?
how old is elon musk
What age is Rafael Nadal?
How old is the Eiffel Tower?
How many years has it been since the moon landing?
How long ago did the Berlin Wall fall?
How old is my son if he was born in March 2019?
How many years has Putin been in power?
How long has the ISS been in orbit?
How old is the Pope?
""",
)
block(
    "age_now",
    True,
    "es",
    """
¿Cuántos años tiene Shakira?
¿Qué edad tiene Nadal?
cuantos años tiene el rey Felipe
¿Cuántos años tiene la Torre Eiffel?
¿Cuántos años hace de la llegada a la Luna?
¿Hace cuánto cayó el muro de Berlín?
¿Cuántos años tiene mi hijo si nació en marzo de 2019?
¿Cuántos años lleva Putin en el poder?
¿Cuánto tiempo lleva la EEI en órbita?
¿Qué edad tiene el Papa?
¿Cuántos años cumple Messi este año?
""",
)

# ============================== timeless ==============================

block(
    "timeless_finance",
    False,
    "en",
    """
How does inflation work?
What is a stock split?
How is an exchange rate determined?
What is a bond yield?
How do I calculate compound interest?
What's the difference between a stock and a bond?
Explain what a P/E ratio is.
How does Bitcoin mining work?
What is the Federal Reserve?
What does APR mean on a loan?
How is GDP measured?
What causes a recession?
how do I calculate VAT on a price
""",
)
block(
    "timeless_finance",
    False,
    "es",
    """
¿Cómo funciona la inflación?
¿Qué es un split de acciones?
¿Cómo se calcula el IVA?
¿Cómo se determina el tipo de cambio?
¿Qué es el euríbor y cómo se calcula?
¿Qué diferencia hay entre acciones y bonos?
explicame que es el PER
¿Cómo funciona la minería de bitcoin?
¿Qué es el Banco Central Europeo?
¿Qué significa TAE en un préstamo?
¿Cómo se mide el PIB?
¿Qué provoca una recesión?
como calculo el interes compuesto
""",
)

block(
    "timeless_history_sports",
    False,
    "en",
    """
Who won the 1998 World Cup?
Who won the first Tour de France?
When did the Berlin Wall fall?
History of the Olympic Games
Who was the first president of the United States?
How many players are on a rugby team?
How does the offside rule work?
Who won Wimbledon in 2008?
When was the Eiffel Tower built?
Who painted Guernica?
When did Spain join the EU?
how does the World Cup group stage work
What was the score of the 2010 World Cup final?
""",
)
block(
    "timeless_history_sports",
    False,
    "es",
    """
¿Quién ganó el Mundial de 1998?
¿Quién ganó el primer Tour de Francia?
¿Cuándo cayó el muro de Berlín?
historia de los Juegos Olímpicos
¿Quién fue el primer presidente de la democracia española?
¿Cuántos jugadores tiene un equipo de rugby?
¿Cómo funciona el fuera de juego?
¿Quién ganó Wimbledon en 2008?
¿Cuándo se construyó la Torre Eiffel?
¿Quién pintó el Guernica?
¿Cuándo entró España en la UE?
quien gano la liga 2010
¿Cómo quedó la final del Mundial de 2010?
""",
)

block(
    "timeless_science_weather",
    False,
    "en",
    """
Why is the sky blue?
How do hurricanes form?
What is a weather front?
What's the difference between weather and climate?
How does a barometer work?
What causes thunder?
What is El Niño?
Why does it snow?
How is the UV index calculated?
average temperature in Seville in July
How do weather forecasts work?
""",
)
block(
    "timeless_science_weather",
    False,
    "es",
    """
¿Por qué el cielo es azul?
¿Cómo se forman los huracanes?
¿Qué es un frente frío?
¿Cuál es la diferencia entre tiempo y clima?
¿Cómo funciona un barómetro?
¿Qué causa los truenos?
¿Qué es El Niño?
¿Por qué nieva?
¿Cómo se calcula el índice UV?
temperatura media de Sevilla en julio
¿Cómo se hacen las predicciones del tiempo?
""",
)

block(
    "timeless_general",
    False,
    "en",
    """
How do I reset my password?
What is a hash map?
Explain recursion with an example
how to make a sourdough starter
What's the capital of Australia?
How many bones are in the human body?
Write a poem about the sea
Translate 'thank you' into German
What's the boiling point of water at sea level?
How do vaccines work?
What is the difference between TCP and UDP?
Summarise the plot of Hamlet.
""",
)
block(
    "timeless_general",
    False,
    "es",
    """
¿Cómo restablezco mi contraseña?
¿Qué es una tabla hash?
explica la recursividad con un ejemplo
como hacer masa madre
¿Cuál es la capital de Australia?
¿Cuántos huesos tiene el cuerpo humano?
Escribe un poema sobre el mar
Traduce 'gracias' al alemán
¿A qué temperatura hierve el agua?
¿Cómo funcionan las vacunas?
¿Qué diferencia hay entre TCP y UDP?
Resume el argumento de Hamlet.
""",
)

block(
    "timeless_facts",
    False,
    "en",
    """
How far is the Moon from the Earth?
What is the speed of light?
How many continents are there?
What is the tallest mountain in Africa?
How many teeth does an adult have?
What language is spoken in Brazil?
How deep is the Mariana Trench?
What is the chemical formula of table salt?
How many strings does a violin have?
What's the longest river in Europe?
How long is a marathon?
What is the freezing point of seawater?
Which organ produces insulin?
How many keys does a piano have?
Why do cats purr?
How many sides does a hexagon have?
What is the main ingredient of guacamole?
Where is the Atacama desert?
How many planets are in the solar system?
What is the longest bone in the body?
""",
)

block(
    "timeless_facts",
    False,
    "es",
    """
¿A qué distancia está la Luna de la Tierra?
¿Cuál es la velocidad de la luz?
¿Cuántos continentes hay?
¿Cuál es la montaña más alta de África?
¿Cuántos dientes tiene un adulto?
¿Qué idioma se habla en Brasil?
¿Qué profundidad tiene la fosa de las Marianas?
¿Cuál es la fórmula química de la sal común?
¿Cuántas cuerdas tiene un violín?
¿Cuál es el río más largo de Europa?
¿Cuánto mide una maratón?
¿A qué temperatura se congela el agua de mar?
¿Qué órgano produce la insulina?
¿Cuántas teclas tiene un piano?
¿Por qué ronronean los gatos?
¿Cuántos lados tiene un hexágono?
¿Cuál es el ingrediente principal del guacamole?
¿Dónde está el desierto de Atacama?
¿Cuántos planetas tiene el sistema solar?
¿Cuál es el hueso más largo del cuerpo?
""",
)

block(
    "timeless_howto",
    False,
    "en",
    """
How do I change a flat tyre?
How do I make a pivot table in Excel?
How do I boil an egg so the yolk stays soft?
How can I improve my sleep?
What should I pack for a hiking trip?
How do I write a cover letter?
How do I remove a red wine stain?
How do I centre a div in CSS?
What's a good stretching routine for runners?
How do I plant tomatoes?
""",
)

block(
    "timeless_howto",
    False,
    "es",
    """
¿Cómo cambio una rueda pinchada?
¿Cómo hago una tabla dinámica en Excel?
¿Cómo cuezo un huevo para que la yema quede blanda?
¿Cómo puedo dormir mejor?
¿Qué llevo para una excursión de montaña?
¿Cómo escribo una carta de presentación?
¿Cómo quito una mancha de vino tinto?
¿Cómo centro un div en CSS?
¿Qué estiramientos van bien para correr?
¿Cómo se plantan tomates?
""",
)

block(
    "trap_next",
    False,
    "en",
    """
How do I get the next element of a list in Python?
How does next() work with a generator?
What is Next.js?
Explain the next permutation algorithm
next.js vs remix for a blog
How do I build a Next button in React?
What's the next number in the sequence 2, 4, 8, 16?
What happens in the next chapter of Of Mice and Men after the barn scene?
What is the next prime after 97?
next generation sequencing explained
In a linked list, what is the next pointer?
How do you say 'next' in Italian?
""",
)
block(
    "trap_next",
    False,
    "es",
    """
¿Cómo obtengo el siguiente elemento de un iterador?
¿Qué es Next.js?
explica el algoritmo de la siguiente permutación
¿Qué ocurre en el próximo capítulo del Quijote tras los molinos?
¿Cuál es el siguiente número de la serie 3, 6, 12?
¿Cuál es el próximo número primo después del 97?
¿Cómo hago un botón de siguiente en React?
¿Qué hace next() en Python?
¿Qué es la secuenciación de nueva generación?
en una lista enlazada que es el puntero next
¿Cómo se dice 'próximo' en inglés?
¿Qué pasa en el capítulo siguiente de Cien años de soledad?
""",
)

block(
    "trap_current",
    False,
    "en",
    """
What is alternating current?
How do ocean currents affect climate?
What is current density?
How do I measure current with a multimeter?
What is a current account deficit?
Difference between voltage and current
What's a current transformer used for?
eddy currents explained
What is the current ratio in accounting?
What is the Gulf Stream current?
How do rip currents form?
""",
)
block(
    "trap_current",
    False,
    "es",
    """
¿Qué es la corriente alterna?
¿Cómo afectan las corrientes oceánicas al clima?
¿Qué es la densidad de corriente?
¿Cómo mido la corriente con un multímetro?
¿Qué es una cuenta corriente?
diferencia entre tension y corriente
¿Qué son las corrientes de Foucault?
¿Qué es el ratio de liquidez corriente?
¿Qué es la corriente del Golfo?
¿Qué es el valor actual neto?
¿Es 'actual' un falso amigo en inglés?
""",
)

block(
    "trap_latest",
    False,
    "en",
    """
What is the latest possible start date in a project schedule?
How do I compute the latest finish time in CPM?
How do I get the last element of an array in JavaScript?
What was the most recent common ancestor of humans and chimps?
How do I sort by newest first in SQL?
What does the latest tag mean in Docker?
What was the last book Tolkien wrote?
Who was the last emperor of the Western Roman Empire?
How do I show the latest commit hash with git?
What is the last letter of the Greek alphabet?
""",
)
block(
    "trap_latest",
    False,
    "es",
    """
¿Cómo obtengo el último elemento de un array?
¿Qué es la fecha de inicio más tardía en un diagrama de Gantt?
¿Cuál fue el último libro que escribió Cervantes?
¿Quién fue el último rey Habsburgo de España?
¿Qué significa la etiqueta latest en Docker?
¿Cómo ordeno por más reciente en SQL?
¿Cómo saco el último carácter de una cadena?
¿Quién fue el último emperador romano de Occidente?
ultimo ancestro comun de humanos y chimpances
¿Cuál es la última letra del alfabeto griego?
""",
)

block(
    "trap_yet_already",
    False,
    "en",
    """
What does 'already' mean?
What's the difference between yet and still?
How do I use already in a sentence?
Is yet a conjunction?
Explain 'not yet' versus 'still not'
What's the meaning of the phrase yet another?
What does YAML stand for?
How do I say already in Spanish?
present perfect with already and yet: rules
Where does 'yet' go in a negative sentence?
""",
)
block(
    "trap_yet_already",
    False,
    "es",
    """
¿Qué significa 'ya' en español?
¿Cuál es la diferencia entre todavía y aún?
¿Cuándo se escribe aún con tilde?
¿Cómo se dice ya en inglés?
¿Qué significa already en español?
uso de yet y still en inglés
¿Es todavía un adverbio de tiempo?
¿Qué diferencia hay entre 'ya no' y 'todavía no'?
explica el present perfect con already y yet
¿Cómo se traduce still al español?
""",
)

block(
    "trap_today_word",
    False,
    "en",
    """
How do you say today in French?
What is 'tomorrow' in German?
Tomorrow Never Dies plot
Who wrote the song Yesterday?
What does the proverb about putting off till tomorrow mean?
Who directed Edge of Tomorrow?
Translate 'see you tomorrow' to Italian
What does the idiom 'yesterday's news' mean?
Who sang 'Tomorrow' in the musical Annie?
What is the Today programme on BBC Radio 4?
""",
)
block(
    "trap_today_word",
    False,
    "es",
    """
¿Cómo se dice mañana en inglés?
¿Cómo se dice 'hoy' en francés?
argumento de El mañana nunca muere
¿Quién compuso Yesterday de los Beatles?
¿Qué significa el refrán 'no dejes para mañana lo que puedas hacer hoy'?
¿Quién dirigió Al filo del mañana?
¿Cómo se escribe 'ayer' en alemán?
traduce 'hasta mañana' al italiano
¿Qué significa 'hoy por ti, mañana por mí'?
¿De qué trata la novela Mañana en la batalla piensa en mí?
""",
)

block(
    "trap_time",
    False,
    "en",
    """
What is the time complexity of quicksort?
What time zone is Madrid in?
What time is breakfast served at the hotel?
What is the time signature of a waltz?
How do I convert UTC to local time in Python?
What is the time value of money?
How do you say 'what time is it' in Spanish?
What day of the week was 4 July 1776?
How many hours are in a week?
What is Greenwich Mean Time?
How do I get the current date in JavaScript?
how to insert today's date in Excel
""",
)
block(
    "trap_time",
    False,
    "es",
    """
¿Cuál es la complejidad temporal de quicksort?
¿En qué zona horaria está Madrid?
¿A qué hora se sirve el desayuno en el hotel?
¿Qué es un compás de tres por cuatro?
¿Cómo convierto UTC a hora local en Python?
¿Cómo se dice 'qué hora es' en inglés?
¿Qué día de la semana fue el 12 de octubre de 1492?
¿Cuántas horas tiene una semana?
¿Qué es la hora del meridiano de Greenwich?
¿Cómo obtengo la fecha actual en JavaScript?
como poner la fecha de hoy en excel
""",
)

block(
    "trap_since",
    False,
    "en",
    """
Since when has Slovakia been an independent country?
Since when is Spain a democracy?
Since what year has the euro been in circulation?
Since when can women vote in Switzerland?
Since when has Hawaii been a US state?
What changed in Python 3 compared with Python 2?
Explain 'since' versus 'for' in the present perfect
How to filter rows since a given date in pandas?
Since which year has the Nobel prize in economics existed?
How did Europe change after the Treaty of Maastricht?
""",
)
block(
    "trap_since",
    False,
    "es",
    """
¿Desde cuándo es Eslovaquia un país independiente?
¿Desde cuándo es España una democracia?
¿Desde qué año circula el euro?
¿Desde cuándo votan las mujeres en Suiza?
¿Desde cuándo es Hawái un estado de EE. UU.?
¿Qué cambió de Python 2 a Python 3?
diferencia entre 'desde' y 'desde hace'
¿Cómo filtro filas desde una fecha en pandas?
¿Desde qué año existe el Nobel de Economía?
¿Desde cuándo se celebra la Tomatina?
""",
)

block(
    "trap_age_period",
    False,
    "en",
    """
How old will I be in 2030 if I was born in 1990?
How old was Mozart when he died?
At what age can you vote in Spain?
How do you calculate someone's age in Excel?
How old is the universe?
What is a fiscal quarter?
How many weeks are in a quarter?
Which season comes after winter?
What does 'this' mean in JavaScript?
How do I say 'this week' in German?
""",
)
block(
    "trap_age_period",
    False,
    "es",
    """
¿Cuántos años tendré en 2040 si nací en 1995?
¿Cuántos años tenía Mozart cuando murió?
¿A qué edad se puede votar en España?
¿Cómo calculo la edad en Excel?
¿Cuántos años tiene el universo?
¿Qué es un trimestre fiscal?
¿Cuántas semanas tiene un trimestre?
¿Qué estación va después del invierno?
¿Qué significa this en JavaScript?
¿Cómo se dice 'esta semana' en alemán?
""",
)

block(
    "trap_misc",
    False,
    "en",
    """
How long should I soak beans overnight?
overnight oats recipe
What are the days of the week in Spanish?
What is a still life painting?
How does a whiskey still work?
Is sparkling or still water better for you?
What is the plot of Still Alice?
What's the difference between 'as of' and 'as at'?
How does a news aggregator work?
What is price elasticity of demand?
Who is the president in the novel Fail-Safe?
How do I open a file in Python?
""",
)
block(
    "trap_misc",
    False,
    "es",
    """
¿Cuánto tiempo dejo en remojo los garbanzos por la noche?
receta de avena remojada de la noche a la mañana
días de la semana en inglés
¿Qué es un bodegón en pintura?
¿Cómo funciona un alambique?
¿Qué es mejor, agua con gas o sin gas?
¿Cuál es el plural de lunes?
¿Cómo se redacta una noticia?
¿Qué es la elasticidad precio de la demanda?
¿Cómo se abre un archivo en Python?
¿Quién fue el presidente de la Primera República española?
""",
)


def normalise(text: str) -> set[str]:
    stripped = unicodedata.normalize("NFKD", text.lower())
    stripped = "".join(c for c in stripped if not unicodedata.combining(c))
    return set(re.findall(r"[a-z0-9]+", stripped))


def near_copy_groups(items: list[str]) -> list[int]:
    """Union-find over word-set Jaccard >= NEAR_COPY_JACCARD; returns a group id per item."""
    parent = list(range(len(items)))

    def find(i: int) -> int:
        while parent[i] != i:
            parent[i] = parent[parent[i]]
            i = parent[i]
        return i

    words = [normalise(t) for t in items]
    for i in range(len(items)):
        for j in range(i + 1, len(items)):
            union = words[i] | words[j]
            if union and len(words[i] & words[j]) / len(union) >= NEAR_COPY_JACCARD:
                parent[find(i)] = find(j)
    return [find(i) for i in range(len(items))]


def build(frozen: dict[str, str] | None = None) -> list[dict[str, object]]:
    """All rows with their split. ``frozen`` (query -> split, from the file already written)
    pins the split of rows seen before, so adding questions never moves old ones; a new row
    that is a near-copy of an old one follows it, and the rest are split as below."""
    frozen = frozen or {}
    rows: list[dict[str, object]] = []
    for (category, volatile, lang), text in DATA.items():
        for line in text.strip().splitlines():
            if line.strip():
                rows.append(
                    {
                        "query": line.strip(),
                        "volatile": volatile,
                        "lang": lang,
                        "category": category,
                        "split": frozen.get(line.strip(), "train"),
                    }
                )
    queries = [str(r["query"]) for r in rows]
    if len(set(queries)) != len(queries):
        dupes = sorted({q for q in queries if queries.count(q) > 1})
        raise SystemExit(f"duplicate questions: {dupes}")
    groups = near_copy_groups(queries)
    pinned: dict[int, set[str]] = {}
    for i, query in enumerate(queries):
        if query in frozen:
            pinned.setdefault(groups[i], set()).add(frozen[query])
    for i, query in enumerate(queries):
        if query not in frozen and groups[i] in pinned:
            splits = pinned[groups[i]]
            rows[i]["split"] = "test" if splits == {"test"} else "train"
    rng = random.Random(SEED)
    strata: dict[tuple[object, object, object], dict[int, list[int]]] = {}
    for i, row in enumerate(rows):
        if queries[i] in frozen or groups[i] in pinned:
            continue
        key = (row["lang"], row["category"], row["volatile"])
        strata.setdefault(key, {}).setdefault(groups[i], []).append(i)
    for key in sorted(strata, key=str):
        members = list(strata[key].values())
        rng.shuffle(members)
        total = sum(len(m) for m in members)
        want = round(total * TEST_SHARE)
        taken = 0
        for member in members:
            if taken >= want:
                break
            # a group that spans strata stays in train: no near-copy across the split
            if sum(1 for g in groups if g == groups[member[0]]) != len(member):
                continue
            for i in member:
                rows[i]["split"] = "test"
            taken += len(member)
    return rows


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument(
        "--out", type=Path, default=Path(__file__).resolve().parent / "questions.jsonl"
    )
    parser.add_argument("--resplit", action="store_true", help="ignore the splits already in --out")
    args = parser.parse_args()
    frozen: dict[str, str] = {}
    if args.out.exists() and not args.resplit:
        for line in args.out.read_text(encoding="utf-8").splitlines():
            if line.strip():
                row = json.loads(line)
                frozen[row["query"]] = row["split"]
    rows = build(frozen)
    with args.out.open("w", encoding="utf-8") as fh:
        for row in rows:
            fh.write(json.dumps(row, ensure_ascii=False) + "\n")
    n_test = sum(r["split"] == "test" for r in rows)
    n_vol = sum(bool(r["volatile"]) for r in rows)
    n_es = sum(r["lang"] == "es" for r in rows)
    print(f"{len(rows)} rows ({n_vol} volatile, {n_es} es, {n_test} test) -> {args.out}")


if __name__ == "__main__":
    main()
