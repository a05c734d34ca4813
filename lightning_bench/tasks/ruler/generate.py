r"""`lightning_bench generate_ruler`: RULER's 13 tasks (Hsieh et al., 2024) generated locally, for any
target length and any tokenizer, deterministically per seed.

    lightning_bench generate_ruler --tokenizer $LB_SMOLLM2_DIR --data_dir DATA/ruler --lengths 4096 8192 \
        --num_samples 100 [--tasks niah_single_1 vt ...] [--haystack essay --essay FILE_OR_FOLDER] \
        [--squad FILE] [--hotpotqa FILE] [--depth 50 | --depths drawn] [--seed 42]

writes DATA/ruler/<length>/<task>.jsonl (atomically) and a manifest.json per length folder (generator
settings, tokenizer, sources and their sha256); `--data.data_dir DATA` then reads them as the tasks
ruler/<task> (split `test` = 4096, or the split named by the length).
The options may also come from `--config FILE` (YAML, the same names; flags after it override it);
`--print_config` prints the resolved options as such a file and exits.

Implemented from RULER's published task definitions (the paper's appendix, scripts/synthetic.yaml, the
task templates of scripts/data/synthetic/constants.py and the generators' rules), not from its code:

- niah: needles "One of the special magic {numbers|uuids} for {key} is: {value}." with keys and values of
  RULER's kinds (words = adjective-noun pairs, 7-digit numbers, uuid4s) in a haystack: the noise sentences
  ("The grass is green. ... There and back again.", one line each), a long text (essay, cut into
  sentences) or distractor needles. The answer needles of sample i of n go at RULER's depth
  DEPTHS[floor(i * 40 / n)] (`depths` "stratified", the default: n = 40 covers the 40 depths once, a
  smaller n spreads over them evenly), at a depth drawn from the 40 ("drawn"), or at `depth`; the other
  needles at depths drawn without replacement. A needle goes at the haystack boundary (between lines,
  sentences or paragraphs) nearest to that fraction of the haystack's tokens (the needles before it
  counted). Rows record `depth` (the first answer needle's) and `needle_depths` (one per output). The
  template is RULER's, singular when one value is asked for.
- vt: a chain VAR X1 = N, VAR X2 = VAR X1, ... (5 variables of 5 capitals) hidden in noise lines, after one
  worked example (3-letter variables) of at most 500 tokens, as RULER's few-shot prompt does.
- cwe: a numbered word list, 10 words 30 times, the others 3 times (6 / 1 below 4096 tokens), after one
  worked example of 40 words (20 below 4096).
- fwe: coded 6-letter words with Zipf counts int(n k^-alpha / zeta(alpha)), the most frequent being "...",
  vocabulary size target // 50; the answer is the next three.
- qa: "Document i:\n..." paragraphs in random order, the distractors taken first from the same article
  (SQuAD) or the question's own paragraphs (HotpotQA), then from the others, as RULER takes them; the gold
  paragraph (HotpotQA: the supporting ones, together) at the depth. Sample i asks the i-th answerable
  question of the file, as RULER does; RULER uses SQuAD v2.0 dev and HotpotQA dev (distractor setting).
  HotpotQA is not available offline: qa_2 needs --hotpotqa FILE (a one-line error without it).

Lengths: `length` = tokens of the input + tokens_to_generate, as RULER counts; the haystack size is
searched (guided bisection) for the largest that keeps length <= target, and where whole haystack units
(a noise line, a distractor needle, a document) leave more than 0.5% of the target unused, the gap is
filled from one more unit cut at a word boundary (noise words; a distractor paragraph; noise words after
distractor needles), so every row is within 1% of the target. A source too short for the target is a
one-line error. Each sample's random draws depend on (seed, task, index) only: sample i is the same
whatever num_samples is, and its needles are the same at every length.

Deviations from RULER, recorded in the rows (`haystack`) or the manifest: the essay haystack is a local text
(the Paul Graham essays are not redistributable), the default haystack for RULER's essay tasks is the
noise (`--haystack essay` for a text); sentences are split by a regular expression (RULER: nltk punkt);
words come from a built-in list (RULER: the `wonderwords` package's lists; `--words wonderwords` uses
them when installed); qa_1 reads ../shared/data's SQuAD 2.0 subset by default.
"""

from __future__ import annotations

import bisect
import hashlib
import json
import math
import os
import random
import re
import sys
import uuid
from dataclasses import dataclass, field
from functools import lru_cache
from pathlib import Path
from typing import Callable, Literal, Optional, Sequence, get_args

from lightning_bench.data.options import NonNegativeInt, Percent, PositiveInt, parse_command
from lightning_bench.tasks.ruler.definitions import SPECS, TASK_NAMES, tokens_to_generate
from lightning_bench.errors import ConfigError, MissingData, unknown_name
from lightning_bench.tasks.generated_sets import check_replaceable, normalized, read_manifest
from lightning_bench.results.io import check_output, write_text_atomic

GENERATOR_VERSION = 3  # 3: stratified answer depths by default, the space after cwe's example "are:", the chat template counted; 2: depths over the haystack alone (1 counted the needles)
NOISE = "The grass is green. The sky is blue. The sun is yellow. Here we go. There and back again."
DEPTHS = tuple(round(100 * i / 39) for i in range(40))  # RULER's np.round(np.linspace(0, 100, 40))
Haystack = Literal["noise", "essay"]
DepthRule = Literal["stratified", "drawn"]
HAYSTACKS = get_args(Haystack)
FILL_AT = 0.005  # fill the gap left by whole units when it exceeds this fraction of the target
TOLERANCE = 0.01  # every row's length is within this fraction below the target
DEFAULT_SOURCES = {"essay": "wikitext-2/test.txt", "squad": "squad_v2.0/dev-v2.0.cs224n_subset.json",
                   "hotpotqa": "hotpotqa/hotpot_dev_distractor_v1.json"}

# RULER's templates (scripts/data/synthetic/constants.py), each split at the question: context | question | prefix
NIAH_INTRO = {False: "Some special magic {v} are hidden within the following text. Make sure to memorize it. "
                     "I will quiz you about the {v} afterwards.\n",
              True: "A special magic {v} is hidden within the following text. Make sure to memorize it. "
                    "I will quiz you about the {v} afterwards.\n"}
NIAH_QUESTION = {False: "What are all the special magic {v} for {query} mentioned in the provided text?",
                 True: "What is the special magic {v} for {query} mentioned in the provided text?"}
NIAH_PREFIX = {False: " The special magic {v} for {query} mentioned in the provided text are",
               True: " The special magic {v} for {query} mentioned in the provided text is"}
NEEDLE = "One of the special magic {v} for {key} is: {value}."
VT_INTRO = "Memorize and track the chain(s) of variable assignment hidden in the following text.\n\n"
VT_QUESTION = "Question: Find all variables that are assigned the value {query} in the text above."
VT_PREFIX = (" Answer: According to the chain(s) of variable assignment in the text above, {num_v} variables are "
             "assgined the value {query}, they are: ")  # RULER's spelling
VT_EXAMPLE_TOKENS = 500  # RULER's few-shot example: at most 500 tokens with its answer and 30 to generate
CWE_INTRO = ("Below is a numbered list of words. In these words, some appear more often than others. "
             "Memorize the ones that appear most often.\n")
CWE_QUESTION = "Question: What are the 10 most common words in the above list?"
CWE_PREFIX = " Answer: The top 10 words that appear most often in the list are:"
FWE_INTRO = ("Read the following coded text and track the frequency of each coded word. Find the three most "
             "frequently appeared coded words. ")
FWE_QUESTION = ("Question: Do not provide any explanation. Please ignore the dots '....'. What are the three most "
                "frequently appeared words in the above coded text?")
FWE_PREFIX = " Answer: According to the coded text above, the three most frequently appeared words are:"
QA_INSTRUCTION = ("Answer the question based on the given documents. Only give me the answer and do not output "
                  "any other words.")
QA_INTRO = QA_INSTRUCTION + "\n\nThe following are given documents.\n\n"
QA_QUESTION = QA_INSTRUCTION + "\n\nQuestion: {query}"
QA_PREFIX = " Answer:"
DOCUMENT = "Document {i}:\n{document}"

_SENTENCE_END = re.compile(r"(?<=[.!?])\s+(?=[\"'(\[]?[A-Z0-9])")

# ---- words ---------------------------------------------------------------------------------------------
# Built-in lists (common English words, written for this module). RULER draws niah keys from adjective-noun
# pairs and cwe words from nouns + adjectives + verbs of the `wonderwords` package (`--words wonderwords`).
ADJECTIVES = """able absent abundant active adorable adventurous afraid agreeable alert alive amazing ambitious
amused ancient angry annual anxious aquatic arctic aromatic artistic ashamed athletic attractive average awake
aware awesome awful bald basic beautiful beloved better big bitter black bland blank blond blue blushing bold
boring bouncy brave breezy brief bright brilliant brisk broad broken bronze brown bumpy busy calm capable careful
careless casual cautious central certain charming cheap cheerful chilly chubby civil classic clean clear clever
cloudy clumsy coastal cold colorful comfortable common complete complex confident content cool cooperative
correct cosmic costly courageous cozy crazy creamy creative crisp crooked crowded crunchy cuddly curious curly
current cute daily damp dangerous daring dark dazzling dear decent deep defiant delicate delicious delightful
dense dental determined different difficult digital diligent dim direct dirty distant divine dizzy domestic
double dramatic dreamy dry dull dusty eager early earnest easy economic edible educated elastic elderly electric
elegant eloquent empty enchanting energetic enormous entire envious equal essential ethical even exact excellent
excited exotic expensive expert faded faint fair faithful familiar famous fancy fantastic far fast fearless
feeble festive fierce fine firm first fit flat flawless fluffy foggy foolish formal fortunate fragile frank free
fresh friendly frozen fruitful full funny fuzzy gentle genuine giant gifted gigantic glad gleaming glorious
glossy golden good gorgeous graceful gracious grand grateful gray great greedy green grim grumpy guilty hairy
handsome handy happy hard harsh hasty healthy heavy helpful helpless hidden high hollow honest hopeful horrible
hot huge humble hungry icy ideal idle illegal immense important impossible innocent intense jolly joyful juicy
jumpy keen kind known large late lazy legal light likely little lively lonely long loose loud lovely loyal lucky
lush magical majestic massive mature mean medical mellow melodic merry messy mighty mild misty modern modest
moist motionless muddy mushy mysterious narrow nasty natural naughty neat nervous new nice nimble noble noisy
normal numerous obedient odd old open orange ordinary organic outgoing oval painful pale parallel patient
peaceful perfect petite plain playful pleasant plump polite poor popular powerful precious pretty prickly proud
public puny pure purple quaint quick quiet rapid rare raspy real red regular remote rich rigid ripe rough round
royal rural rustic sad safe salty sandy scary second secret selfish serious shaggy shallow sharp shiny short shy
silent silky silly simple sincere skinny sleepy slim slow small smart smooth soft solid sore sour spicy splendid
spotless square stale steady steep sticky stormy straight strange strict strong sturdy subtle sudden sunny super
sweet swift tall tame tasty tender tense terrible thankful thick thin thirsty thorny tidy tiny tired tough tricky
tropical true ugly unique united upbeat upset urban useful vague vast velvet vibrant victorious violet vivid warm
wary weak wealthy weary wet whole wide wild windy wise witty wooden worried yellow young zany zealous"""
NOUNS = """account acorn actor airport album alley anchor angle animal ankle answer ant apple apron arch arm army
arrow art artist ash attic aunt avenue baby badge bag bakery ball balloon banana band bank barn barrel basket bat
bath battery beach beam bean bear beard bed bee beetle bell belt bench berry bicycle bird birthday biscuit
blanket blade block blossom board boat body bone book boot bottle boundary bowl box brain branch bread brick
bridge broom brother bubble bucket bud building bulb bull bush butter button cabin cabinet cable cactus cake
calendar camel camera camp canal candle canoe canvas canyon cap captain car card carpet carriage carrot cart
castle cat cattle cave ceiling cellar chain chair chalk channel chapter cheese cherry chess chest chicken child
chimney chin church circle city clam class clay cliff clock cloth cloud clover coach coast coat cobweb coconut
coffee coin collar comet compass cook copper coral cord corn corner cottage cotton couch country cousin cow crab
cradle crane crayon cream creek crib cricket crow crown crystal cup curtain cushion daisy dam dancer daughter
deer desert desk diamond dinner dinosaur dish doctor dog doll dolphin donkey door dragon drawer dream dress drill
drum duck dust eagle ear earth eel egg elbow elephant elk engine envelope eraser estate evening eye fabric face
factory fairy falcon family fan farm father feather fence fern ferry field fig film finger fire fish flag flame
flock floor flower flute fly fog folder food foot forest fork fountain fox frame friend frog fruit furnace galaxy
game garage garden garlic gate gem giraffe girl glacier glass glove goat gold goose gorilla grain grape grass
gravel guitar gull hall hammer hand harbor harp hat hawk hay head heart hedge helmet hen hill hippo hobby honey
hook horn horse hose hospital hotel house hut ice idea igloo inch ink insect island ivory jacket jam jar jelly
jewel journal judge juice kangaroo kettle key kidney king kitchen kite kitten knee knife knight knot koala ladder
lake lamb lamp lantern laptop lawn leaf lemon lens leopard letter library lily lime lion lizard lobster lock
locket log machine magnet mailbox mango map maple marble market mask meadow meal medal melon mirror mitten mole
money monkey moon moose morning moth mother motor mountain mouse mouth mud mug museum mushroom music nail napkin
necklace needle nest net newspaper night noodle nose notebook novel nut oak oar ocean octopus office oil olive
onion orbit orchard organ ostrich otter oven owl ox oyster page pail paint palace palm pan panda paper parade
parcel park parrot party pasta path peach peacock peanut pear pearl pebble pelican pen pencil pepper piano
picture pie pig pigeon pillow pilot pine pipe pirate pizza planet plant plate plum pocket poem pond pony potato
pottery pumpkin puppy purse puzzle quail queen quilt rabbit raccoon radio raft rain rainbow rake raven record
reef ribbon rice ring river road robin robot rock rocket roof room rooster root rope rose ruby rug ruler sail
sailor salad salt sand sandwich saucer scarf school scissors sea seal season seed shark sheep shelf shell ship
shirt shoe shop shore shovel sister skate skirt sky sled sleeve slipper snail snake snow soap sock sofa soil
soldier song soup spade sparrow spider spoon spring squash squirrel stable stair stamp star station statue steam
stone stool storm story stove straw stream street string submarine sugar suit summer sun swan sweater swing table
tail tea teacher teapot telescope tent thread throne thumb ticket tiger timber toad toast toe tomato tongue tool
tooth torch tower town toy tractor train tray tree triangle truck trumpet tulip tunnel turkey turtle umbrella
uncle unicorn valley vase vegetable vest village vine violin volcano wagon wall walnut walrus wand wardrobe wasp
watch water wave wax weasel well whale wheat wheel whistle willow window wing winter wire wizard wolf wood wool
worm wrench yacht yard yarn zebra zipper"""
VERBS = """accept add admire advise agree allow amuse announce appear applaud arrange arrive ask attach attend
bake balance bang bathe battle beg behave belong bless blink boil bolt borrow bounce brake breathe brush build
bump burn bury buzz calculate call care carry carve catch chase cheer chew clap climb close collect comb compare
complain copy cough count cover crack crawl cross crush cry cycle dance dare deliver describe design destroy
develop dig divide drag drain draw drink drive drop earn enjoy enter escape examine excite explain explore fade
fail fasten fetch fill find fix flash float flood flow fold follow fry gather glow grab grin grip guard guess
guide happen harvest hug hum hunt hurry imagine improve inform invent invite iron jog join joke juggle jump kick
kneel knit knock label land laugh launch learn lift listen live load look love march mark match measure melt
mend milk mix move nod note obey observe offer order pack paddle park pass pause peel perform pick plan play
point polish pour practice pray print promise protect pull pump punch push question race raise reach read relax
remember repair repeat reply report rescue rest return ride rinse roll rub run rush save scatter scrub search
serve settle sew shake share shave shine shiver shout sing sip sketch skip sleep slide smell smile sneeze sniff
snore solve sort spark spell spill spin splash spray sprout squeeze stack stare start steer step stir stitch
store stretch stroll study suggest supply surprise swim talk taste teach tease thank throw tickle tie tip touch
tour trace trade travel treat trust try tug turn twist type unlock unpack vanish visit wade wait walk wander want
warn wash weigh whisper wink wish wonder work worry wrap write yawn yell zoom"""


@lru_cache(maxsize=4)
def word_lists(source: str = "builtin") -> tuple[tuple[str, ...], tuple[str, ...], tuple[str, ...]]:
    """(adjectives, nouns, verbs): the built-in lists, `wonderwords`' (RULER's), or a file's words (one a
    line, used for all three)."""
    if source == "builtin":
        return tuple(ADJECTIVES.split()), tuple(NOUNS.split()), tuple(VERBS.split())
    if source == "wonderwords":
        try:
            from importlib.resources import files

            assets = files("wonderwords") / "assets"
        except ModuleNotFoundError:
            raise ConfigError("--words wonderwords needs the `wonderwords` package (pip install wonderwords); "
                              "or use --words builtin") from None
        read = lambda name: tuple(w.strip() for w in (assets / name).read_text().split("\n") if w.strip())  # noqa: E731
        return read("adjectivelist.txt"), read("nounlist.txt"), read("verblist.txt")
    path = Path(source)
    if not path.is_file():
        raise ConfigError(f"--words {source!r} is not builtin, wonderwords or a file of words (one a line)")
    words = tuple(w for w in path.read_text().split() if w)
    if len(words) < 20:
        raise ConfigError(f"--words {source}: {len(words)} words; RULER's tasks need at least 20")
    return words, words, words


# ---- randomness, search, placement ----------------------------------------------------------------------
def _rng(*parts) -> random.Random:
    """A generator seeded by `parts` only (stable across runs, processes and Python versions)."""
    digest = hashlib.sha256(json.dumps(parts, default=str).encode()).digest()
    return random.Random(int.from_bytes(digest[:8], "big"))


def _largest(measure: Callable[[int], tuple[int, object]], target: int, limit: int, guess: int) -> tuple[int, tuple]:
    """The largest n in [0, limit] whose measure(n)[0] (a length, non-decreasing in n) is <= target, and
    its measure; measure(0) must fit. A bisection guided by the measured tokens per unit."""
    seen: dict[int, tuple] = {}

    def probe(n: int) -> int:
        if n not in seen:
            seen[n] = measure(n)
        return seen[n][0]

    base = probe(0)
    lo, hi = 0, limit + 1  # measure(lo) fits; measure(hi) does not (limit + 1: never measured)
    n = guess
    while hi - lo > 1:
        if not lo < n < hi:
            n = (lo + hi) // 2
        length = probe(n)
        if length <= target:
            lo = n
        else:
            hi = n
        per_unit = max((length - base) / n, 1e-3)
        step = (target - length) / per_unit
        n = n + max(1, math.floor(step)) if length <= target else n - max(1, math.ceil(-step))
    return lo, seen[lo]


class TokenCounter:
    """Tokens of a text (cached): where a depth falls is measured in the tokenizer's tokens."""

    def __init__(self, tokenizer):
        self.tokenizer, self.cache = tokenizer, {}

    def __call__(self, text: str) -> int:
        if text not in self.cache:
            if len(self.cache) > 200_000:
                self.cache.clear()
            self.cache[text] = len(self.tokenizer.encode(text))
        return self.cache[text]


def _boundaries(units: Sequence[str], joiner: str, items: Sequence[tuple[float, str]],
                count: Callable[[str], int]) -> list[int]:
    """For each (depth in percent, text) to insert, the unit boundary (0..len(units)) nearest to that
    fraction of the HAYSTACK's own tokens, as RULER places needles (int(len(haystack) * depth / 100) over the
    haystack alone: the inserted items are not counted, so several needles do not push each other later).
    Units are counted one by one; a joiner of whitespace other than newlines counts as no token."""
    glue = count(joiner) if "\n" in joiner else 0
    starts = [0]
    for u in units:
        starts.append(starts[-1] + count(u) + glue)
    out = []
    for depth, _ in items:
        at = depth / 100 * starts[-1]
        j = bisect.bisect_left(starts, at)
        if j > 0 and (j == len(starts) or at - starts[j - 1] <= starts[j] - at):
            j -= 1
        out.append(min(j, len(units)))
    return out


def _insert(units: Sequence[str], items: Sequence[tuple[int, str]]) -> list[str]:
    """Units with each (boundary, text) inserted at its boundary, items at one boundary in their order."""
    by_place: dict[int, list[str]] = {}
    for place, text in items:
        by_place.setdefault(place, []).append(text)
    out: list[str] = []
    for j, unit in enumerate(units):
        out += by_place.get(j, [])
        out.append(unit)
    return out + by_place.get(len(units), [])


def _noise_words(n: int) -> str:
    words = (NOISE + " ") * (n // len(NOISE.split()) + 1)
    return " ".join(words.split()[:n])


def _random_value(rng: random.Random, kind: str, words: Sequence[str]) -> str:
    if kind == "numbers":
        return str(rng.randint(10 ** 6, 10 ** 7 - 1))
    if kind == "uuids":
        return str(uuid.UUID(int=rng.getrandbits(128), version=4))
    return rng.choice(words)


@dataclass
class Prompt:
    context: str
    question: str
    answer_prefix: str
    outputs: list[str]
    depth: Optional[float] = None
    extra: dict = field(default_factory=dict)

    @property
    def input(self) -> str:
        return self.context + self.question + self.answer_prefix


# ---- the task families: render(n units, w filler words) -> Prompt -------------------------------------------
class _Sample:
    limit = 0  # most haystack units
    joiner = "\n"
    count: Callable[[str], int] = len  # tokens of a unit (generate_task sets a TokenCounter)

    def fill_limit(self, n: int) -> int:  # filler words available after n whole units (0: no filler)
        return 0

    def render(self, n: int, w: int = 0) -> Prompt:
        raise NotImplementedError


class _Niah(_Sample):
    def __init__(self, key: tuple, args: dict, haystack: str, target: int, depth: Optional[float], essay, words):
        rng = _rng(*key)
        self.key, self.haystack, self.essay = key, haystack, essay
        self.type_k, self.type_v = args["type_k"], args["type_v"]
        adjectives, nouns, _ = words
        self.pairs = _pair_words(adjectives, nouns)
        num_k = max(args["num_k"], args["num_q"])
        keys, values, needles = [], [], []
        for i in range(num_k):
            keys.append(_random_value(rng, self.type_k, self.pairs))
            values.append([_random_value(rng, self.type_v, self.pairs) for _ in range(args["num_v"])])
            needles += [((i, j), NEEDLE.format(v=self.type_v, key=keys[i], value=values[i][j]))
                        for j in range(args["num_v"])]
        rng.shuffle(needles)
        queried = rng.sample(range(num_k), args["num_q"])
        answer_ids = [(i, j) for i in queried for j in range(args["num_v"])]
        if depth is None:
            drawn = dict(zip((nid for nid, _ in needles), map(float, rng.sample(DEPTHS, len(needles)))))
        else:
            others = [nid for nid, _ in needles if nid not in answer_ids]
            drawn = {**dict(zip(others, map(float, rng.sample(DEPTHS, len(others))))),
                     **{nid: float(depth) for nid in answer_ids}}
        self.needles = sorted(((drawn[nid], text) for nid, text in needles), key=lambda x: x[0])
        self.outputs = [values[i][j] for i, j in answer_ids]
        self.needle_depths = [drawn[nid] for nid in answer_ids]
        queries = [keys[i] for i in queried]
        query = ", ".join(queries[:-1]) + ", and " + queries[-1] if len(queries) > 1 else queries[0]
        single = args["num_q"] * args["num_v"] == 1
        v = self.type_v[:-1] if single else self.type_v
        self.intro = NIAH_INTRO[single].format(v=v)
        self.question = NIAH_QUESTION[single].format(v=v, query=query)
        self.prefix = NIAH_PREFIX[single].format(v=v, query=query)
        self.pool: list[str] = []  # distractor needles (haystack "needle"), drawn lazily from their own stream
        self.pool_rng = _rng(*key, "distractors")
        if haystack == "essay":
            self.limit, self.joiner = len(essay), " "
        else:
            self.limit = target  # a unit is at least one token

    def fill_limit(self, n: int) -> int:
        return 0 if self.haystack == "essay" else 4 * len(NOISE.split())

    def _distractors(self, n: int) -> list[str]:
        while len(self.pool) < n:
            self.pool.append(NEEDLE.format(v=self.type_v, key=_random_value(self.pool_rng, self.type_k, self.pairs),
                                           value=_random_value(self.pool_rng, self.type_v, self.pairs)))
        return self.pool[:n]

    def render(self, n: int, w: int = 0) -> Prompt:
        if self.haystack == "essay":
            units = _SENTENCE_END.split(" ".join(self.essay[:n])) if n else []
        else:
            units = [NOISE] * n if self.haystack == "repeat" else self._distractors(n)
            if w:
                units = units + [_noise_words(w)]
        places = _boundaries(units, self.joiner, self.needles, self.count)
        text = self.joiner.join(_insert(units, [(p, needle) for p, (_, needle) in zip(places, self.needles)]))
        return Prompt(self.intro + text + "\n", self.question, self.prefix, list(self.outputs), self.needle_depths[0],
                      {"needle_depths": list(self.needle_depths)})


@lru_cache(maxsize=4)
def _pair_words(adjectives: tuple[str, ...], nouns: tuple[str, ...]) -> "_PairWords":
    return _PairWords(adjectives, nouns)


class _PairWords(Sequence):
    """The adjective-noun pairs RULER's word keys are drawn from ("jittery-hospital"), without building them."""

    def __init__(self, adjectives, nouns):
        self.adjectives, self.nouns = sorted(set(adjectives)), sorted(set(nouns))

    def __len__(self):
        return len(self.adjectives) * len(self.nouns)

    def __getitem__(self, i):
        a, b = divmod(i, len(self.nouns))
        return f"{self.adjectives[a]}-{self.nouns[b]}"


def _vt_chain(rng: random.Random, hops: int, letters: int) -> tuple[list[str], list[str], str]:
    names: list[str] = []
    while len(names) < hops + 1:
        name = "".join(rng.choices("ABCDEFGHIJKLMNOPQRSTUVWXYZ", k=letters))
        if name not in names:
            names.append(name)
    value = str(rng.randint(10000, 99998))
    chain = [f"VAR {names[0]} = {value}"] + [f"VAR {names[j + 1]} = VAR {names[j]} " for j in range(hops)]
    return names, chain, value


def _vt_noise(chain: Sequence[str], lines: int, rng: random.Random, partial: str = "") -> str:
    noise = [NOISE + "\n"] * lines + ([partial + "\n"] if partial else [])
    positions = sorted(rng.sample(range(max(len(noise), len(chain))), len(chain)))
    for j, p in enumerate(positions):  # RULER: sorted distinct positions, the j-th statement at p_j + j
        noise.insert(min(p + j, len(noise)), chain[j])
    return " ".join(noise).replace(". \n", ".\n")


class _VariableTracking(_Sample):
    def __init__(self, key: tuple, args: dict, target: int, example_lines: int):
        rng = _rng(*key)
        self.key, self.limit, self.hops = key, target, args["num_hops"]
        ex_names, ex_chain, ex_value = _vt_chain(rng, min(10, self.hops), 3)
        self.example = vt_example(ex_chain, ex_value, ex_names, example_lines, rng)
        self.names, self.chain, self.value = _vt_chain(rng, self.hops, 5)

    def fill_limit(self, n: int) -> int:
        return len(NOISE.split()) - 1

    def render(self, n: int, w: int = 0) -> Prompt:
        text = _vt_noise(self.chain, n, _rng(*self.key, "positions", n, w), _noise_words(w) if w else "")
        return Prompt(self.example + "\n\n" + VT_INTRO + text + "\n", VT_QUESTION.format(query=self.value),
                      VT_PREFIX.format(num_v=self.hops + 1, query=self.value), list(self.names))


def vt_example(chain, value: str, names, lines: int, rng: random.Random) -> str:
    """RULER's worked vt example: a full prompt (chain in `lines` noise lines) with its answer."""
    text = _vt_noise(chain, lines, rng)
    return (VT_INTRO + text + "\n" + VT_QUESTION.format(query=value)
            + VT_PREFIX.format(num_v=len(names), query=value) + " " + " ".join(names))


def _vt_example_lines(tokenizer, seed) -> int:
    """How many noise lines RULER's vt example holds for this tokenizer (the example, its answer and 30
    tokens to generate within 500 tokens)."""
    rng = _rng(seed, "vt", "example-size")
    names, chain, value = _vt_chain(rng, 4, 3)

    def measure(m: int) -> tuple[int, None]:
        return len(tokenizer.encode(vt_example(chain, value, names, m, _rng(seed, m)))) + 30, None

    return _largest(measure, VT_EXAMPLE_TOKENS, 200, 10)[0]


def _numbered(words: Sequence[str]) -> str:
    return " ".join(f"{i + 1}. {w}" for i, w in enumerate(words))


class _CommonWords(_Sample):
    def __init__(self, key: tuple, args: dict, target: int, words):
        rng = _rng(*key)
        pool = sorted(set(words[0]) | set(words[1]) | set(words[2]))
        self.key, self.num_cw = key, args["num_cw"]
        if target < 4096:  # RULER's short setting
            (ex_n, ex_cw, ex_ucw), (self.freq_cw, self.freq_ucw) = (20, 3, 1), (6, 1)
        else:
            (ex_n, ex_cw, ex_ucw), (self.freq_cw, self.freq_ucw) = (40, 10, 3), (args["freq_cw"], args["freq_ucw"])
        example = rng.sample(pool, ex_n)
        listed = example[:self.num_cw] * ex_cw + example[self.num_cw:] * ex_ucw
        rng.shuffle(listed)
        self.example = (CWE_INTRO + _numbered(listed) + "\n" + CWE_QUESTION + CWE_PREFIX
                        + " " + _numbered(example[:self.num_cw]))  # RULER joins the answer with a space
        self.order = rng.sample(pool, len(pool))
        self.limit = len(pool) - self.num_cw

    def render(self, n: int, w: int = 0) -> Prompt:
        common, rare = self.order[:self.num_cw], self.order[self.num_cw:self.num_cw + n]
        listed = common * self.freq_cw + rare * self.freq_ucw
        _rng(*self.key, "shuffle", n).shuffle(listed)
        context = self.example + "\n" + CWE_INTRO + _numbered(listed) + "\n"
        return Prompt(context, CWE_QUESTION, CWE_PREFIX, list(common))


class _FrequentWords(_Sample):
    def __init__(self, key: tuple, args: dict, target: int):
        rng = _rng(*key)
        from scipy.special import zeta

        size = max(target // 50, 5)  # RULER: vocab_size = max_seq_length // 50
        vocab: set[str] = set()
        while len(vocab) < size:
            vocab.add("".join(rng.choices("abcdefghijklmnopqrstuvwxyz", k=6)))
        self.vocab = sorted(vocab)
        rng.shuffle(self.vocab)
        self.vocab[0] = "..."  # the most frequent "word" is noise
        self.alpha, self.zeta = args["alpha"], float(zeta(args["alpha"]))
        self.key, self.limit = key, 4 * target

    def render(self, n: int, w: int = 0) -> Prompt:
        words = [word for k, word in enumerate(self.vocab, 1)
                 for _ in range(int(n * k ** -self.alpha / self.zeta))]
        _rng(*self.key, "shuffle", n).shuffle(words)
        return Prompt(FWE_INTRO + " ".join(words) + "\n", FWE_QUESTION, FWE_PREFIX, list(self.vocab[1:4]))


class _QuestionAnswering(_Sample):
    joiner = "\n\n"

    def __init__(self, key: tuple, qa: dict, docs: Sequence[str], depth: Optional[float]):
        rng = _rng(*key)
        self.key, self.docs = key, docs
        self.gold = list(qa["gold"])
        near = [d for d in qa["near"] if d not in self.gold]
        rng.shuffle(near)
        taken = set(self.gold) | set(near)
        rest = [d for d in range(len(docs)) if d not in taken]
        rng.shuffle(rest)
        self.order = near + rest  # the question's own and the same article's paragraphs first, as RULER
        self.limit = len(self.order)
        self.depth = float(rng.choice(DEPTHS)) if depth is None else float(depth)
        self.question, self.outputs = qa["query"], list(qa["outputs"])

    def fill_limit(self, n: int) -> int:
        return len(self.docs[self.order[n]].split()) - 1 if n < len(self.order) else 0

    def render(self, n: int, w: int = 0) -> Prompt:
        chosen = [self.docs[d] for d in self.order[:n]]
        _rng(*self.key, "order", n).shuffle(chosen)
        if w:
            chosen.append(" ".join(self.docs[self.order[n]].split()[:w]))
        gold = [self.docs[g] for g in self.gold]
        place = _boundaries(chosen, self.joiner, [(self.depth, self.joiner.join(gold))], self.count)[0]
        placed = chosen[:place] + gold + chosen[place:]
        text = self.joiner.join(DOCUMENT.format(i=i + 1, document=d) for i, d in enumerate(placed))
        return Prompt(QA_INTRO + text + "\n\n", QA_QUESTION.format(query=self.question), QA_PREFIX,
                      list(self.outputs), self.depth)


# ---- sources -------------------------------------------------------------------------------------------------
def shared_data_dir() -> Path:
    root = Path(__file__).resolve().parents[2]
    return Path(os.environ.get("LB_SHARED_DIR", root.parent / "shared")) / "data"


def source_path(kind: str, path: Optional[str | Path]) -> Path:
    """The file for `kind` (essay, squad, hotpotqa): `path`, else ../shared/data's default; missing: one line."""
    flag = {"essay": "--essay FILE_OR_FOLDER", "squad": "--squad FILE", "hotpotqa": "--hotpotqa FILE"}[kind]
    chosen = Path(path) if path is not None else shared_data_dir() / DEFAULT_SOURCES[kind]
    if chosen.exists():
        return chosen
    if kind == "hotpotqa":
        raise MissingData(f"ruler/qa_2 needs HotpotQA's dev file (hotpot_dev_distractor_v1.json), which is not "
                          f"available offline ({chosen} not found); pass {flag}")
    what = {"essay": "a long text (a .txt file or a folder of them)", "squad": "a SQuAD .json (dev-v2.0.json)"}[kind]
    raise MissingData(f"RULER's {kind} source {chosen} not found; expected {what}: pass {flag}")


def _clean(text: str) -> str:
    """Plain prose: WikiText's tokenization undone (@-@ and friends, spaces before punctuation, headings,
    <unk>), whitespace collapsed."""
    if "@-@" in text or "<unk>" in text or "\n = " in text:
        text = "\n".join(line for line in text.split("\n") if not re.match(r"\s*=.*=\s*$", line))
        text = text.replace(" @-@ ", "-").replace(" @,@ ", ",").replace(" @.@ ", ".").replace("<unk>", "")
        text = re.sub(r"[ \t]+", " ", text)
        text = re.sub(r" ([.,;:!?)])(?=\s|$)", r"\1", text)
        text = re.sub(r"\( ", "(", text).replace(" n't", "n't").replace(" 's", "'s")
    return re.sub(r"\s+", " ", text).strip()


@lru_cache(maxsize=4)
def essay_words(path: str) -> tuple[str, ...]:
    """The words of a text file, or of a folder's .txt files in name order."""
    p = Path(path)
    files = sorted(p.rglob("*.txt")) if p.is_dir() else [p]
    text = " ".join(_clean(f.read_text(encoding="utf-8", errors="replace")) for f in files)
    words = tuple(text.split(" ")) if text else ()
    if len(words) < 100:
        raise ConfigError(f"RULER essay haystack: {path} holds {len(words)} words; pass a long text with --essay")
    return words


@lru_cache(maxsize=4)
def qa_source(kind: str, path: str) -> tuple[tuple[dict, ...], tuple[str, ...]]:
    """(questions, documents) of SQuAD (answerable questions in file order; `near` = the other paragraphs of
    the article) or HotpotQA (`gold` = the supporting paragraphs, `near` = the question's others)."""
    try:
        data = json.loads(Path(path).read_text(encoding="utf-8-sig"))
    except (OSError, UnicodeDecodeError, json.JSONDecodeError) as err:
        raise ConfigError(f"RULER {kind}: {path} cannot be read as JSON ({type(err).__name__})") from None
    questions: list[dict] = []
    try:
        if kind == "squad":
            docs = sorted({p["context"] for a in data["data"] for p in a["paragraphs"]})
            index = {d: i for i, d in enumerate(docs)}
            for article in data["data"]:
                near = [index[p["context"]] for p in article["paragraphs"]]
                for p in article["paragraphs"]:
                    for qa in p["qas"]:
                        answers = [a["text"] for a in qa.get("answers", [])]
                        if not qa.get("is_impossible", False) and answers:
                            questions.append({"query": qa["question"], "outputs": answers,
                                              "gold": [index[p["context"]]], "near": near})
        else:
            rows = data if isinstance(data, list) else data["data"]
            docs = sorted({f"{t}\n{''.join(s)}" for r in rows for t, s in r["context"]})
            index = {d: i for i, d in enumerate(docs)}
            for r in rows:
                own = [index[f"{t}\n{''.join(s)}"] for t, s in r["context"]]
                titles = {t for t, _ in r.get("supporting_facts", [])}
                gold = [index[f"{t}\n{''.join(s)}"] for t, s in r["context"] if t in titles] or own
                questions.append({"query": r["question"], "outputs": [r["answer"]], "gold": gold, "near": own})
    except (KeyError, TypeError, ValueError) as err:
        layout = ("SQuAD's {data: [{paragraphs: [{context, qas}]}]}" if kind == "squad"
                  else "HotpotQA's [{question, answer, context: [[title, sentences]], supporting_facts}]")
        raise ConfigError(f"RULER {kind}: {path} is not {layout} ({type(err).__name__}: {err})") from None
    if not questions:
        raise ConfigError(f"RULER {kind}: {path} holds no answerable question")
    return tuple(questions), tuple(docs)


def _sha256(path: Path) -> str:
    digest = hashlib.sha256()
    for f in (sorted(p for p in path.rglob("*.txt")) if path.is_dir() else [path]):
        digest.update(f.read_bytes())
    return digest.hexdigest()


# ---- generation ----------------------------------------------------------------------------------------------
def generate_task(task: str, tokenizer, target_length: int, num_samples: int, seed: int = 42,
                  haystack: str = "noise", depth: Optional[float] = None, essay: Optional[str | Path] = None,
                  squad: Optional[str | Path] = None, hotpotqa: Optional[str | Path] = None,
                  words: str = "builtin", depths: DepthRule = "stratified", template_tokens: int = 0) -> list[dict]:
    """`num_samples` rows of RULER task `task` (niah_single_1, ..., qa_2), each `target_length` tokens long
    within 1% (RULER's count: input tokens + tokens_to_generate, never more than the target).

    tokenizer: anything with `encode(text) -> ids` (data/tokenization.py's build_tokenizer).
    haystack: what RULER's essay tasks (niah_single_2/3, multikey_1, multivalue, multiquery) use: `noise`
        (RULER's repeated sentences; no data needed) or `essay` (the text of `essay`: a file or a folder of
        .txt files; default ../shared/data/wikitext-2/test.txt). The other tasks keep RULER's haystack.
    depth: niah and qa only: where (percent of the haystack) the answer needle(s) / gold paragraph(s) go;
        None = by the `depths` rule: "stratified" (sample i of n at DEPTHS[floor(i * 40 / n)], so a table's
        n rows cover the depths evenly instead of a draw's clusters) or "drawn" (per sample, per needle).
    template_tokens: the tokens a chat template adds around the prompt (RULER's --model_template_token), counted
        within the target so a chat-templated row is not cut: `length` stays RULER's count (input + tokens to
        generate), `length_w_model_temp` adds them, as RULER's rows do.
    The seed, task and index decide a sample's random draws; a stratified depth also depends on num_samples.
    """
    short = task.removeprefix("ruler/")
    if short not in SPECS:
        raise unknown_name("RULER task", task, TASK_NAMES)
    if isinstance(target_length, bool) or not isinstance(target_length, int) or target_length < 1:
        raise ConfigError(f"target_length must be a positive number of tokens, got {target_length!r}")
    if num_samples < 1:
        raise ConfigError(f"num_samples must be >= 1, got {num_samples}")
    if haystack not in HAYSTACKS:
        raise unknown_name("RULER haystack", haystack, HAYSTACKS)
    kind, args = SPECS[short]
    if depth is not None and (kind not in ("niah", "qa") or not 0 <= depth <= 100):
        raise ConfigError(f"depth applies to the niah and qa tasks, as a percent in [0, 100]; got {depth!r} "
                          f"for {short}")
    if depths not in get_args(DepthRule):
        raise unknown_name("depth rule", depths, get_args(DepthRule))
    max_new = tokens_to_generate(short)
    word_sets = word_lists(words)

    def depth_of(index: int) -> Optional[float]:
        if depth is not None or depths == "drawn":
            return depth
        return float(DEPTHS[index * len(DEPTHS) // num_samples])

    make, used = _maker(short, kind, args, tokenizer, target_length, seed, haystack, depth_of, essay, squad,
                        hotpotqa, word_sets, num_samples)
    rows, guess, counter = [], 1, TokenCounter(tokenizer)
    for index in range(num_samples):
        sample = make(index)
        sample.count = counter
        length, prompt, n = _fit(short, sample, tokenizer, target_length - template_tokens, max_new, guess)
        guess = max(n, 1)
        rows.append({"index": index, "input": prompt.input, "outputs": prompt.outputs, "length": length,
                     "context": prompt.context, "question": prompt.question, "answer_prefix": prompt.answer_prefix,
                     "max_new_tokens": max_new, "depth": prompt.depth, "target_length": target_length,
                     "length_w_model_temp": length + template_tokens,
                     "task": short, "haystack": used, **prompt.extra})
    return rows


def chat_template_tokens(tokenizer, answer_prefix: str = " The answer is") -> int:
    """The tokens the tokenizer's chat template adds around a prompt and its answer prefix, as a run with
    --chat_template auto renders it (tasks/prompts.render_generation); 0 without a template."""
    from lightning_bench.tasks.prompts import Generation, render_generation

    tok = getattr(tokenizer, "tok", None)
    if getattr(tok, "chat_template", None) is None:
        return 0
    text = "What is the special magic number?"
    chat, _ = render_generation(Generation(text, (), answer_prefix=answer_prefix), tok)
    return len(tokenizer.encode(chat)) - len(tokenizer.encode(text + answer_prefix))


def _maker(short, kind, args, tokenizer, target, seed, haystack, depth, essay, squad, hotpotqa, words, count):
    """(index -> sample, the haystack's name for the rows); `depth(index)`: the sample's answer depth or None."""
    key = (seed, short)
    if kind == "niah":
        used = args["haystack"]
        text = ()
        if used == "essay" and haystack == "noise":
            used = "repeat"
        elif used == "essay":
            text = essay_words(str(source_path("essay", essay)))
        name = {"repeat": "noise", "essay": "essay", "needle": "needle"}[used]
        return (lambda i: _Niah((*key, i), args, used, target, depth(i), text, words)), name
    if kind == "vt":
        lines = _vt_example_lines(tokenizer, seed)
        return (lambda i: _VariableTracking((*key, i), args, target, lines)), "noise"
    if kind == "cwe":
        return (lambda i: _CommonWords((*key, i), args, target, words)), "words"
    if kind == "fwe":
        return (lambda i: _FrequentWords((*key, i), args, target)), "coded_words"
    dataset = args["dataset"]
    path = source_path(dataset, squad if dataset == "squad" else hotpotqa)
    questions, docs = qa_source(dataset, str(path))
    if count > len(questions):
        raise ConfigError(f"ruler/{short}: {path} has {len(questions)} answerable questions, fewer than the "
                          f"{count} samples asked for")
    return (lambda i: _QuestionAnswering((*key, i), questions[i], docs, depth(i))), dataset


def _fit(short: str, sample: _Sample, tokenizer, target: int, max_new: int, guess: int) -> tuple[int, Prompt, int]:
    """(length, prompt, whole units) of the longest rendering of `sample` within the target."""

    def measure(n: int, w: int = 0) -> tuple[int, Prompt]:
        prompt = sample.render(n, w)
        return len(tokenizer.encode(prompt.input)) + max_new, prompt

    base = measure(0)[0]
    if base > target:
        raise ConfigError(f"ruler/{short}: {target} tokens is too short: the prompt without its haystack and the "
                          f"{max_new} tokens to generate already take {base}")
    n, (length, prompt) = _largest(measure, target, sample.limit, guess)
    words = sample.fill_limit(n)
    if target - length > FILL_AT * target and words > 0:
        _, (length, prompt) = _largest(lambda w: measure(n, w), target, words, 1)
    if length < (1 - TOLERANCE) * target:
        raise ConfigError(f"ruler/{short}: its source runs out at {length} tokens, more than 1% short of {target}; "
                          "give a longer source (--essay, --squad, --hotpotqa, --words wonderwords) or a shorter "
                          "length")
    return length, prompt, n


# ---- command line ------------------------------------------------------------------------------------------
def write_rows(path: Path, rows: list[dict]) -> Path:
    """JSON lines written atomically (a temporary file beside, then renamed)."""
    return write_text_atomic(path, "".join(json.dumps(r, ensure_ascii=False) + "\n" for r in rows))


@dataclass
class RulerConfig:
    """generate_ruler's options (`--config FILE` reads them from YAML under the same names)."""

    tokenizer: str
    """the model's tokenizer: an HF folder or id (or gpt2)"""
    data_dir: str
    """folder for <length>/<task>.jsonl (e.g. DATA/ruler); --out is its deprecated spelling"""
    lengths: list[PositiveInt] = field(default_factory=lambda: [4096])
    """target lengths in tokens"""
    tasks: Optional[list[str]] = None
    """default: all 13 (qa_2 only with --hotpotqa)"""
    num_samples: PositiveInt = 500
    """rows per task and length (RULER: 500)"""
    seed: NonNegativeInt = 42
    """the seed every sample's draws derive from"""
    haystack: Haystack = "noise"
    """for RULER's essay tasks"""
    essay: Optional[str] = None
    """text file or folder of .txt for --haystack essay (default ../shared/data/wikitext-2/test.txt)"""
    squad: Optional[str] = None
    """SQuAD json for qa_1 (default ../shared/data's SQuAD 2.0 subset)"""
    hotpotqa: Optional[str] = None
    """HotpotQA dev json for qa_2 (not available offline)"""
    depth: Optional[Percent] = None
    """niah/qa answer depth in percent (default: by --depths)"""
    chat_template: bool = True
    """count the tokenizer's chat template (if it has one) in the length, as runs use it (RULER's
    --model_template_token); false: RULER's bare count"""
    depths: DepthRule = "stratified"
    """niah/qa answer depths without --depth: stratified (row i of n at RULER's depth floor(i*40/n)) or drawn"""
    words: str = "builtin"
    """builtin, wonderwords (RULER's lists) or a file"""

    def __post_init__(self):
        for option, values in (("--lengths", self.lengths), ("--tasks", self.tasks)):
            if values is not None and not values:
                raise ConfigError(f"generate_ruler: {option} is empty; give at least one value")


def main(argv: Optional[list[str]] = None) -> int:
    args = parse_command("generate_ruler", RulerConfig, sys.argv[1:] if argv is None else argv, __doc__,
                         old_spellings={"--out": "--data_dir"})
    if args.tokenizer == "word":
        raise ConfigError("--tokenizer word has no fixed vocabulary to count RULER's lengths; name the model's "
                          "tokenizer")
    check_output("--data_dir", args.data_dir)  # before the tokenizer loads and the rows are drawn
    tasks = [t.removeprefix("ruler/") for t in (args.tasks or TASK_NAMES)]
    for t in tasks:
        if t not in SPECS:
            raise unknown_name("RULER task", t, TASK_NAMES)
    if args.tasks is None and args.hotpotqa is None:
        try:
            source_path("hotpotqa", None)
        except MissingData as err:
            print(f"skipping qa_2: {err}", file=sys.stderr)
            tasks.remove("qa_2")
    from lightning_bench.data.tokenization import build_tokenizer

    tokenizer = build_tokenizer(args.tokenizer)
    sources = {}
    for kind, value, needed in (("essay", args.essay, args.haystack == "essay" and any(
            SPECS[t][1].get("haystack") == "essay" for t in tasks)), ("squad", args.squad, "qa_1" in tasks),
            ("hotpotqa", args.hotpotqa, "qa_2" in tasks)):
        if needed:
            path = source_path(kind, value)
            sources[kind] = {"path": str(path), "sha256": _sha256(path)}
    out = Path(args.data_dir)
    # the chat template the run will wrap the rows in (--chat_template auto), counted in the length as RULER's
    # --model_template_token: a row of N tokens then fits --max_context N whole, its needles uncut
    template = chat_template_tokens(tokenizer) if args.chat_template else 0

    def source_of(task: str) -> Optional[dict]:
        kind = {"qa_1": "squad", "qa_2": "hotpotqa"}.get(task, "essay")
        return sources.get(kind) if kind != "essay" or SPECS[task][1].get("haystack") == "essay" else None

    def arguments(task: str) -> dict:  # what decides a task's rows, besides its length
        needle = SPECS[task][0] in ("niah", "qa")
        return {"generator": GENERATOR_VERSION, "num_samples": args.num_samples, "seed": args.seed,
                "haystack": args.haystack if SPECS[task][1].get("haystack") == "essay" else None,
                "source": (source_of(task) or {}).get("sha256"),  # the bytes, not how the path was spelled
                "depth": args.depth if needle else None,
                "depths": args.depths if needle and args.depth is None else None,
                "words": _sha256(Path(args.words)) if Path(args.words).is_file() else args.words,  # a file by its bytes
                "tokenizer": tokenizer.content(), "model_template_tokens": template}

    for length in args.lengths:  # nothing is drawn before every file to be written is known replaceable
        manifest = read_manifest(out / str(length) / "manifest.json")
        for task in tasks:
            check_replaceable(out / str(length) / f"{task}.jsonl", manifest.get(task), arguments(task), "--data_dir")
    for length in args.lengths:
        folder = out / str(length)
        manifest_path = folder / "manifest.json"
        manifest = read_manifest(manifest_path)
        for task in tasks:
            depth = args.depth if SPECS[task][0] in ("niah", "qa") else None  # --depth: the tasks with a needle
            rows = generate_task(task, tokenizer, length, args.num_samples, seed=args.seed, haystack=args.haystack,
                                 depth=depth, essay=args.essay, squad=args.squad, hotpotqa=args.hotpotqa,
                                 words=args.words, depths=args.depths, template_tokens=template)
            path = write_rows(folder / f"{task}.jsonl", rows)
            lengths = [r["length"] for r in rows]
            source = {"qa_1": "squad", "qa_2": "hotpotqa"}.get(task, rows[0]["haystack"])
            manifest[task] = {"generator": f"lightning_bench.tasks.ruler.generate@{GENERATOR_VERSION}",
                              "rows": len(rows), "target_length": length, "seed": args.seed,
                              "haystack": rows[0]["haystack"], "depth": depth, "words": args.words,
                              "depths": None if depth is not None or SPECS[task][0] not in ("niah", "qa")
                              else args.depths,
                              "tokenizer": tokenizer.describe(), "source": sources.get(source),
                              "model_template_tokens": template,
                              "length_min": min(lengths), "length_max": max(lengths),
                              "arguments": normalized(arguments(task))}
            write_text_atomic(manifest_path, json.dumps(manifest, indent=1, sort_keys=True) + "\n")
            print(f"ruler/{task} @{length}: {len(rows)} rows, lengths {min(lengths)}-{max(lengths)} -> {path}")
    return 0
