"""Form variants: the one canonical form in which every comparison sees a question.

Two questions that differ only in *form* are the same question, and no model is asked:

- **width** — full-width and half-width forms (``ＳＦ１２３`` / ``SF123``, ``＄２５０`` / ``$250``,
  ``？`` / ``?``, the ideographic space), invisible characters (zero-width spaces, soft
  hyphens), curly apostrophes;
- **spacing** — runs of spaces, spaces beside Chinese characters (``小红书 app`` /
  ``小红书app``), a space before the final question mark, and the spaces or hyphens inside
  one word (``sign in`` / ``signin``, ``e mail`` / ``email``, ``AirPods Pro 2`` /
  ``airpods pro2``, ``Wi-Fi`` / ``wifi``);
- **case** of one word (``ZOOM`` / ``Zoom``, ``IOS`` / ``iOS``), unless the lower-case
  spelling is another word and both questions were typed with case ("Please Polish this" /
  "Please polish this", ``US`` / ``us``, ``Windows`` / ``windows``);
- **punctuation** — an apostrophe left out of a contraction (``whats`` / ``what's``, ``cant``
  / ``can't``: a negation either way), a final "?", "." or "!".

Everything else is not form: one word mapped to another (a typo, a British spelling, a
character of the same pinyin) is a guess, and never makes two questions equal here.  Where
a space or hyphen would make another word ("now here" / "nowhere", "a part" / "apart",
"re-sign" / "resign", "1-2" / "12"), it is kept.

:func:`folded` is the canonical text (case kept); :func:`same_question` decides form
equality of two texts; :func:`form_key` is a digest every two same questions share (an index
looks candidates up by it).  The exact key (``normalize``) folds characters the same way
(``fold_characters``).
"""

from __future__ import annotations

import re
import unicodedata
from collections.abc import Mapping
from functools import lru_cache
from hashlib import blake2b
from itertools import pairwise
from types import MappingProxyType

from .script import CJK, HAN
from .words import FUNCTION_WORDS_EN, is_lower_case_word

__all__ = [
    "CODE_LINE",
    "CONTRACTIONS",
    "about_characters",
    "about_words",
    "case_differs",
    "fold_characters",
    "fold_token",
    "folded",
    "form_key",
    "literals",
    "mentions_phrase",
    "restore_apostrophes",
    "same_question",
    "skeleton",
    "space_beside_han",
    "tells_case",
    "unify",
]


def _width_table() -> dict[int, int | str | None]:
    """Full-width and half-width forms → their plain forms; invisible characters → none;
    spacing characters → a space; curly apostrophes and quotes → straight ones."""
    table: dict[int, int | str | None] = {}
    for code in (0x3000, *range(0xFF00, 0xFFEF)):
        tag, _, target = unicodedata.decomposition(chr(code)).partition(" ")
        if tag in ("<wide>", "<narrow>") and target and " " not in target:
            table[code] = int(target, 16)
    table.update(dict.fromkeys(map(ord, "\u00ad\u200b\u2060\ufeff"), None))
    table.update(dict.fromkeys(map(ord, "\u00a0\u1680\u202f\u205f\u3000"), " "))
    table.update(dict.fromkeys(range(0x2000, 0x200B), " "))
    table.update(dict.fromkeys(map(ord, "\u2019\u2018\u02bc\uff07"), "'"))
    table.update(dict.fromkeys(map(ord, "\u201c\u201d\uff02"), '"'))
    return table


_WIDTH = _width_table()


# A line with code punctuation keeps its full-width characters: "if x > 1：", "int a = 1；"
# are what is asked about; so does an operator typed full-width among half-width characters
# ("x ＝＝ 1"), while "２ｘ＋３＝１１", typed full-width throughout, is "2x+3=11".
CODE_LINE = re.compile(r"[=<>{}\[\];\\]|[A-Za-z_]\w{0,64}\(")
_FULL_WIDTH_OPERATOR = re.compile("[＝＜＞｛｝［］｜＆]")
_FULL_WIDTH_ALNUM = re.compile("[０-９Ａ-Ｚａ-ｚ]")


def fold_token(token: str) -> str:
    """``fold_characters`` for one token, which keeps full-width operators that stand among
    half-width characters."""
    if _FULL_WIDTH_OPERATOR.search(token) and not _FULL_WIDTH_ALNUM.search(token):
        return token
    return fold_characters(token)


def fold_characters(text: str) -> str:
    """``text`` with width, invisible characters, spacing characters and curly apostrophes
    folded, then canonically composed (NFC); nothing else (no NFKC: ``10³``, ``ß``, ligatures
    and emoji joiners stay)."""
    if text.isascii():
        return text
    return unicodedata.normalize("NFC", text.translate(_WIDTH))


# Contractions typed without their apostrophe that spell no other word ("were", "well",
# "ill", "its", "lets", "shed", "wed" are words, and stay as typed); "cant" and "wont" read as
# the negations they nearly always are.
CONTRACTIONS = {
    **{w: w[:-1] + "'" + w[-1] for w in (
        "dont doesnt didnt isnt arent wasnt werent hasnt havent hadnt couldnt wouldnt "
        "shouldnt mustnt neednt aint cant wont whats thats hows wheres whos theres heres "
        "whens whys".split())},
    **{w: w[:-2] + "'" + w[-2:] for w in "youre theyre youve theyve weve youll theyll "
       "youd theyd".split()},
    **{w: w[:-2] + "'" + w[-2:] for w in ("wouldve", "couldve", "shouldve")},
    "im": "i'm",
    "ive": "i've",
}  # fmt: skip
_CONTRACTION = re.compile(r"(?<![\w'])(" + "|".join(CONTRACTIONS) + r")(?![\w'])", re.IGNORECASE)


def restore_apostrophes(text: str) -> str:
    """``dont`` → ``don't``, ``Whats`` → ``What's`` (the case of each letter kept)."""
    if not _CONTRACTION.search(text):
        return text

    def restore(m: re.Match[str]) -> str:
        typed = m.group()
        plain = CONTRACTIONS[typed.lower()]
        at = plain.index("'")
        if plain.startswith("i'"):  # the pronoun: "im", "ive" → "I'm", "I've"
            return "I" + "'" + typed[at:]
        return typed[:at] + "'" + typed[at:]

    return _CONTRACTION.sub(restore, text)


# Code and quoted strings are never folded: fenced blocks, inline code, calls written with
# full-width brackets (``print（1）`` is a syntax error that ``print(1)`` is not), and what
# quotes hold (``len('a\u200bb')`` counts the invisible character)
_CODE = re.compile(
    r"```.*?(?:```|$)|`[^`\n]*`|[A-Za-z_][\w.]{0,64}（[^（）\s]{0,256}）"
    r"|\"[^\"\n]*\"|“[^”\n]*”|(?<![\w'])'[^'\n]*'(?![\w'])",
    re.DOTALL,
)
# Spaces beside Chinese characters are form; between Japanese kana or Korean words they
# separate words, and stay.
_HAN = "\u2e80-\u2fff\u3000-\u303f" + HAN  # Han and the CJK punctuation
_KANA_HANGUL = "\u1100-\u11ff\u3040-\u30ff\u3130-\u318f\uac00-\ud7af"
_HAN_SPACE = re.compile(rf"(?<=[{_HAN}]) +(?![{_KANA_HANGUL}])|(?<![{_KANA_HANGUL}]) +(?=[{_HAN}])")
_HAN_CHAR = re.compile(rf"[{_HAN}]")
_KANA_HANGUL_CHAR = re.compile(rf"[{_KANA_HANGUL}]")


def space_beside_han(before: str, after: str) -> bool:
    """A space between the characters ``before`` and ``after`` is form: one is Chinese and
    the other is not kana or hangul."""
    if before < "\u1100" and after < "\u1100":
        return False  # the common case: neither is an East Asian character
    return bool(
        (_HAN_CHAR.match(before) and not _KANA_HANGUL_CHAR.match(after))
        or (_HAN_CHAR.match(after) and not _KANA_HANGUL_CHAR.match(before))
    )


_SPACES = re.compile(r"[ \t]+")
_FINAL_SPACE = re.compile(r"\s+(?=[?!？！.。]+$)")
_COMMA_SPACE = re.compile(r"(?<=\w) +(?=[,，](?:\s|$))")
# full-width punctuation carries its own space: between Latin words it folds to its ASCII
# form and a space
_WIDE_PUNCT_SPACE = re.compile(r"(?<=[A-Za-z0-9])([，；：？！])(?=[A-Za-z0-9])")


def folded(text: str) -> str:
    """The canonical form of ``text``: characters folded (width, invisible, apostrophes),
    apostrophes restored in contractions, one space between words and none beside Chinese
    characters or before the final question mark.  Code in backticks is kept verbatim.
    Case is kept: whether it matters is decided per word (:func:`same_question`)."""
    return _folded(text) if len(text) <= 4096 else _fold_prose(text)


@lru_cache(maxsize=20_000)
def _folded(text: str) -> str:
    return _fold_prose(text)


def _fold_prose(text: str) -> str:
    # code, and a question about characters, keep their full-width characters and quotes
    width = not (CODE_LINE.search(text) or about_characters(text))
    apostrophes = not about_words(text)  # "What does wont mean?" is no "won't"
    out, last = [], 0
    for m in _CODE.finditer(text):
        out.append(_fold_plain(text[last : m.start()], width=width, apostrophes=apostrophes))
        code = m.group()
        out.append('"' + code[1:-1] + '"' if code[0] == "“" and width else code)
        last = m.end()
    out.append(_fold_plain(text[last:], width=width, apostrophes=apostrophes))
    return "".join(out).strip()


def _fold_plain(text: str, *, apostrophes: bool = True, width: bool = True) -> str:
    if width and not CODE_LINE.search(text):
        text = _WIDE_PUNCT_SPACE.sub(r"\1 ", text)  # "Mastercard，and" is "Mastercard, and"
        text = "".join(fold_token(t) for t in re.split(r"(\s+)", text))
    if apostrophes:
        text = restore_apostrophes(text)
    text = _SPACES.sub(" ", text)
    text = _HAN_SPACE.sub("", text)
    text = _COMMA_SPACE.sub("", text)
    return _FINAL_SPACE.sub("", text)


# Form equality -----------------------------------------------------------------------------
# Letters and digits of alphabetic scripts (a space or hyphen beside a Chinese character is
# another matter: "气温-5℃" is no "气温5℃")
_ALNUM = rf"[^\W_\u2e80-\u30ff{HAN}\uac00-\ud7af]"
_SEPARATOR = re.compile(rf"(?<={_ALNUM})[ \-](?={_ALNUM})")
_FINAL = re.compile(r"(?<=[^\W_]|[)\"'`])[?.？。]+$")  # not "!": "n!", "save!", "Int!"


def skeleton(text: str) -> str:
    """What two same questions share exactly: the folded text in lower case (``lower``, not
    ``casefold``: "Maße" is no "Masse"), without the spaces or hyphens between letters and
    digits and without the final punctuation."""
    return _SEPARATOR.sub("", _FINAL.sub("", folded(text))).lower()


def form_key(text: str) -> str:
    """A digest that every two questions equal in form share (``same_question``): an index
    finds form variants by it without asking the embedder."""
    return blake2b(skeleton(text).encode("utf-8", "surrogatepass"), digest_size=16).hexdigest()


def same_question(a: str, b: str) -> bool:
    """True when ``a`` and ``b`` differ only in form (see the module): the same question,
    whatever a model would score them.  A question about words themselves (``about_words``)
    has no variants but runs of spaces and the final punctuation."""
    if a == b:
        return True
    if about_characters(a) or about_characters(b):
        return _spaced(a) == _spaced(b)
    if about_words(a) or about_words(b):  # (and the case decided strictly: case_differs)
        x, y = _worded(a), _worded(b)
        return x.lower() == y.lower() and not case_differs(x, y)
    x, y = folded(a), folded(b)
    if x == y:
        return True
    if skeleton(x) != skeleton(y) or literals(x) != literals(y):
        return False
    return _separators_are_form(x, y) and not case_differs(x, y)


# Questions about their own form.  About words ("What does kick back mean?", "Use wont in a
# sentence", "Polish翻译成中文是什么"): their spelling, case and apostrophes are what they ask
# about, and only width and spacing are form.  About characters ("How many bytes is Ａ?",
# "全角和半角"): not even width is.
_ABOUT_WORDS = re.compile(
    r"\b(?:mean|means|meaning|meant|define[ds]?|definition|spell(?:ed|ing|s)?|pronounc\w*|"
    r"synonyms?|antonyms?|translat\w*|in a sentence|plurals? of|grammar\w*|grammatical\w*|"
    r"apostrophes?|hyphen\w*|capitali[sz]\w*|capital letters?|lower ?case|upper ?case|"
    r"rhymes? with|say in|word for|in (?:simple|plain|other|your own) words|"
    r"typos?|misspel\w*|proofread\w*|prefix(?:es)?|suffix(?:es)?|letters|contractions?|"
    r"nouns?|verbs?|adjectives?|adverbs?|correct english|proper english)\b"
    r"|\b([\w'’]+)\s+or\s+\1\b"  # two forms of one word compared: "english or English"
    r"|\b(?:the|this|that)\s+(?:word|term|phrase|letter|abbreviation|acronym)s?\s+"
    r"(?!(?:of|and|or|for|to|in|on|is|are|was|were|that|this)\b)[\"'“‘]?\w"
    r"|\ban?\s+(?:(?:real|proper|valid|correct|english)\s+)?(?:word|term)\b"
    r"|是什么意思|什么意思|的意思|意思是|含义|怎么读(?!取)|读音|发音|翻译|单词|拼写|词性|怎么说|"
    r"英[语文]|同义词|反义词|大小写|大写|小写|字母",
    re.IGNORECASE,  # (a question typed in capitals asks it too)
)
_ABOUT_CHARACTERS = re.compile(
    r"\b(?:unicode|utf-?(?:8|16)|ascii|code ?points?|characters?|bytes?|encod\w*|"
    r"full-?width|half-?width|glyphs?|fonts?|emoji|spaces|whitespace)\b|字符|字节|编码|全角|半角|"
    r"字体|空格",
    re.IGNORECASE,
)


@lru_cache(maxsize=20_000)
def about_words(text: str) -> bool:
    """True for a question about words themselves (their meaning, spelling, case,
    translation …): the spelling, case and apostrophes it holds are what it asks about."""
    return _ABOUT_WORDS.search(text) is not None or about_characters(text)


def mentions_phrase(text: str) -> bool:
    """True for a question about words, or about a phrase to say or write ("How do I politely
    say no, thanks?", "decline with no, thanks", "write yes, please in French", "write "please
    call me back" in Spanish"): its thanks and its please are what it asks about, not
    discourse."""
    return about_words(text) or any(p.search(text) for p in _PHRASE)


_COURTESY_WORD = r"(?:please|thanks|thank|thx|sorry|kindly|cheers)\b"
_PHRASE = (
    re.compile(  # a phrase after a verb of saying, set off by a comma or a colon
        r"\b(?:say|write|text|reply|respond|answer|decline|greet|sign off|end)\b[^?？]*?[,，:：]",
        re.IGNORECASE,
    ),
    re.compile(  # a courtesy word right after a verb of saying: "write please call me back"
        rf"\b(?:say|says|write|text|translate|reply|respond|answer|greet)\s+[\"“‘']?{_COURTESY_WORD}",
        re.IGNORECASE,
    ),
    re.compile(  # a courtesy word inside quotes: "for 'please call me back'"
        rf"(?:[\"“‘]|(?:^|\s)')[^\"”’]*?\b{_COURTESY_WORD}", re.IGNORECASE
    ),
)


def about_characters(text: str) -> bool:
    """True for a question about characters (their code, width, bytes …): not even their
    width is form."""
    return _ABOUT_CHARACTERS.search(text) is not None


def _spaced(text: str) -> str:
    """``text`` with runs of spaces as one and the final "?" off: all a question about
    characters may differ in."""
    text = _SPACES.sub(" ", text.strip())
    return text[:-1].rstrip() if text[-1:] in ("?", "？") else text


def _worded(text: str) -> str:
    """The canonical form of a question about words: width and spacing folded, nothing
    else (no apostrophe put back, case kept), the final "?" or "." off."""
    return _FINAL.sub("", _fold_plain(text, apostrophes=False))


# Literals ----------------------------------------------------------------------------------
# Ordinary sentence punctuation: any other symbol makes a token literal (code, math, emoji).
_PLAIN = frozenset(".,;:!?'\"()-–—“”…。，？！、；：（）《》「」·•‧%")
# a flag (-R), a call (len(), a format (%Y), a factorial (100!)
_CODE_LIKE = re.compile(r"^--?\w|\w\(|%[A-Za-z]|\d!")
_TOKENS = re.compile(rf"[^\s{HAN}]+")


def literals(text: str) -> tuple[str, ...]:
    """The tokens of ``text`` that are symbols, code, flags, math or emoji (``-R``, ``\\W``,
    ``%Y``, ``Mb/s``, ``10³``, ``39.5℃``, ``Int!``, ``String?`` inside a sentence), and in code
    or a question about characters any full-width form, sorted: never paraphrased, so two
    questions that differ in one differ, case included."""
    text = folded(text)
    # an arithmetic expression, spaces aside: where its brackets stand is what it computes
    found = ["".join(m.group().split()) for m in _MATH.finditer(text)]
    text = _MATH.sub(" ", text)
    found += [m.group() for m in _MARKED.finditer(text)]
    found += [f"U+{ord(c):04X}" for c in text if c in _ODD_SPACES]  # kept only where they count
    for token in _TOKENS.findall(text):
        if _CODE_LIKE.search(token) or any(
            not (c.isalnum() or c in _PLAIN)
            or (c.isdigit() and not c.isdecimal())
            or ord(c) in _WIDTH
            for c in token
        ):
            found.append(
                token.rstrip("?.？。") if _CODE_LIKE.search(token) else token.rstrip("?.!？。！")
            )
    return tuple(sorted(found))


# numbers joined by operators, with brackets where any stand: "(2 + 3) * 4", "10 - (4 - 2)"
_MATH = re.compile(
    r"[(（]*\s*\d+(?:\.\d+)?\s*[)）]*(?:\s*[-+*/×÷^]\s*[(（]*\s*\d+(?:\.\d+)?\s*[)）]*)+"
)
_ODD_SPACES = frozenset("\u00a0\u1680\u202f\u205f\u3000\u200b\u2060\ufeff\u00ad") | {
    chr(c) for c in range(0x2000, 0x200B)
}
# "!" or "?" on a word inside a sentence, or "!" on the last word: a type, a method, a
# factorial ("Int!", "String?", "save!", "n!"), not the question's own mark
_MARKED = re.compile(
    r"[A-Za-z0-9_]{1,32}[!?](?=[^\s!?.,;:)\]}'\"。，？！、])|[A-Za-z0-9_]{1,32}!$"
    # a minus between letters or digits: "x-y", "n-1", "x-2y" (not "e-mail", "x-ray")
    r"|(?<![^\W_])[^\W_]-(?:[^\W_](?![^\W_])|\d)"
)


# Spaces and hyphens inside a word ------------------------------------------------------------
def _separators_are_form(x: str, y: str) -> bool:
    """Every place where one text splits a word (a space or hyphen) and the other does not
    joins two parts that make one word (``_one_word``)."""
    splits_x, splits_y = _splits(x), _splits(y)
    for where in splits_x.keys() ^ splits_y.keys():
        if not _one_word(*(splits_x if where in splits_x else splits_y)[where]):
            return False
    return True


def _splits(text: str) -> dict[int, tuple[str, str, str, str]]:
    """The separators between letters or digits in ``text``, by position (the number of
    letters and digits before them): the parts they separate, the separator, and the word
    before the first part."""
    out: dict[int, tuple[str, str, str, str]] = {}
    body = _FINAL.sub("", text)
    for m in _SEPARATOR.finditer(body):
        left = re.search(rf"(?:(\S+)\s+)?({_ALNUM}+)$", body[: m.start()])
        right = re.match(rf"{_ALNUM}+", body[m.end() :])
        if left and right:
            position = sum(c.isalnum() for c in body[: m.start()])
            before = (left.group(1) or "").lower()
            out[position] = (left.group(2).lower(), right.group().lower(), m.group(), before)
    return out


_PARTICLES = frozenset("in out up on off down over back through away".split())
_PREFIXES = frozenset("re un de pre co non anti dis mis over under out".split())
# Adjectives that, as a separate word, describe what follows (a green house, a hot dog) and,
# joined, name a kind of thing (a greenhouse, a hotdog)
_DESCRIBING = frozenset(
    "black white green blue red brown grey gray yellow pink dark light hot cold sweet sour "
    "cheap gentle big small little old new high low short long hard soft iron gold silver "
    "wild free fast slow".split()
)


def _one_word(left: str, right: str, separator: str = " ", before: str = "") -> bool:
    """``left`` and ``right`` (folded) written apart are one word written together:

    - a letter before digits (``pro 2``, ``PS 5``, ``B 12``) — not digits before digits
      (``1-2``, ``B1 2``: two numbers) nor before letters (``2 XL``, ``3 M``: a quantity and
      its unit or size);
    - a letter before a word (``e mail``, ``x-ray``) — not a letter beside a letter or a
      digit (``x-y``, ``n-1``: a minus) nor "a" or "i" (``a way``);
    - a verb and its particle (``sign in``, ``set up``, ``check out``), content words
      (``wi fi``, ``web site``, ``screen shot``);

    never a function word (``now here``, ``every day``, ``may be``), a prefix that changes
    the word (``re-sign``), or an adjective that describes the next word (``green house``,
    ``hot dog``, ``sweet bread``).  (A question about words themselves — "What does kick back
    mean?" — has no form variants at all: ``about_words``.)"""
    if left[-1].isdigit():
        return False  # "1-2" / "12", "2 XL" / "2XL"
    if len(left) == 1 or len(right) == 1:  # "e mail", "x-ray"; not "x-y", "n-1", "a way"
        if right[0].isdigit():
            return separator == " "  # "B 12" / "B12", but "n-1" is a minus
        return len(left) == 1 and left not in ("a", "i") and len(right) >= 3
    if right[0].isdigit():
        return True  # "pro 2" / "pro2", "ps 5" / "ps5"
    if left in _PREFIXES or left in _DESCRIBING or left in FUNCTION_WORDS_EN:
        return False  # "re-sign", "green house", "now here", "a part"
    return right not in FUNCTION_WORDS_EN or right in _PARTICLES  # not "may be", "any one"


_LATIN_RUN = re.compile(rf"{_ALNUM}+")


@lru_cache(maxsize=8192)
def unify(a: str, b: str) -> tuple[str, str]:
    """``a`` and ``b`` with each word that one writes in two or three parts (a space or a
    hyphen between them) and the other as one, written the same way on both sides (joined,
    lower case) where the join is form (``_one_word``): ``Wi-Fi`` / ``wifi``, ``ps 5`` /
    ``PS5``, ``sign in`` / ``signin``.  For the guards, which compare the two questions word
    by word; nothing else is rewritten (memoized: a lookup compares one pair in every rule,
    and a candidate's group with the same question)."""
    if about_words(a) or about_words(b):
        return a, b  # "What does kick back mean?" asks about the spelling itself
    joined: dict[str, str] = {}  # a spelling (folded) → the joined form both sides get
    for x, y in ((a, b), (b, a)):
        whole = {m.group().lower(): m.group() for m in _LATIN_RUN.finditer(y)}
        runs = list(_LATIN_RUN.finditer(x))
        for size in (2, 3):
            for i in range(len(runs) - size + 1):
                run = runs[i : i + size]
                key = "".join(m.group().lower() for m in run)
                if key not in whole:  # (first: most runs join into no word of the other)
                    continue
                separators = [x[p.end() : q.start()] for p, q in pairwise(run)]
                if any(sep not in (" ", "-") for sep in separators):
                    continue
                before = runs[i - 1].group().lower() if i else ""
                if all(
                    _one_word(p.group().lower(), q.group().lower(), sep, before)
                    for (p, q), sep in zip(pairwise(run), separators, strict=True)
                ):
                    joined[x[run[0].start() : run[-1].end()].lower()] = key
                    joined[key] = key
    if not joined:
        return a, b
    spellings = sorted(joined, key=len, reverse=True)
    pattern = re.compile(
        rf"(?<!{_ALNUM})(?:"
        + "|".join(re.escape(s).replace(r"\ ", "[ -]").replace(r"\-", "[ -]") for s in spellings)
        + rf")(?!{_ALNUM})",
        re.IGNORECASE,
    )

    def rewrite(text: str) -> str:
        return pattern.sub(
            lambda m: joined.get(
                m.group().lower().replace("-", " "), joined.get(m.group().lower(), m.group())
            ),
            text,
        )

    return rewrite(a), rewrite(b)


# Case --------------------------------------------------------------------------------------
@lru_cache(maxsize=20_000)
def tells_case(text: str) -> bool:
    """True for a text typed with case: it has capitals and lower-case letters (a text all
    in lower case, all in capitals, or in Title Case, tells nothing of the case of its
    words)."""
    letters = [c for c in text if c.isalpha() and c.lower() != c.upper()]
    told = any(c.isupper() for c in letters) and any(c.islower() for c in letters)
    return told and not _title_case(text)


def _title_case(text: str) -> bool:
    """ "What Is The Best Way To Learn Guitar?": three words or more, every one capitalized
    but for the small words titles leave in lower case."""
    words = re.findall(r"[A-Za-z]+", text)
    if len(words) < 3 or CJK.search(text):
        return False
    if not all(w[0].isupper() or w in _TITLE_SMALL for w in words):
        return False
    # ordinary words capitalized past the first: "Causes Thunder", not "Is Turkey in Europe"
    styled = [w for w in words[1:] if w[0].isupper() and w[1:].islower()]
    return sum(is_lower_case_word(w.lower()) for w in styled) >= 2


_TITLE_SMALL = frozenset("a an the and or but nor of in on at to for by with from as vs".split())


@lru_cache(maxsize=8192)
def case_differs(x: str, y: str) -> bool:
    """True when the case of a word tells the two questions apart:

    - a word of one or two letters that mixes cases on one side (``mW`` / ``MW``, ``Co`` /
      ``CO``: units and symbols);
    - a word in lower case on one side and with a capital on the other, both texts typed with
      case, whose lower-case spelling is a word too ("Please Polish this" / "Please polish
      this", ``US`` / ``us``, ``Windows`` / ``windows``) or that has two letters or fewer (``MS``
      / ``ms``: an abbreviation's case is often its meaning) — unless the lower-case side also
      typed in lower case a name that is no word (``json``, ``uber``: a typist who does not
      capitalize names tells nothing by not capitalizing this one);
    - a word right after a number (a unit or a code: ``100 Mbps`` / ``100 MBps``, ``1 MHz`` /
      ``1 mHz``), typed otherwise.

    A capital that only starts a sentence tells nothing, and capitals against capitals are
    one word (``ZOOM`` / ``Zoom``, ``IOS`` / ``iOS``) — except a letter standing alone
    (``vim里按O`` / ``vim里按o``, ``grep -I`` / ``grep -i``), an acronym of two or three
    letters against a capitalized word (``MAC`` / ``Mac``, ``WHO`` / ``Who``), and in a
    question about words (``about_words``: "英文May是什么意思"), where every case difference
    of a word counts, and of a name only ``VPN`` / ``vpn`` does not."""
    if _lone_letter_case(x, y):
        return True  # "vim里按O" / "vim里按o", "grep -i" / "grep -I": a key, a flag, a grade
    if _acronym_against_name(x, y) or _acronym_against_name(y, x):
        return True  # "MAC是什么" / "Mac是什么", "WHO recommends …" / "Who recommends …"
    told = tells_case(x) and tells_case(y)
    titled = _title_case(x) or _title_case(y)  # its short words are capitalized by style
    strict = about_words(x) or about_words(y)  # "What does Polish mean?": any case counts
    units_x, units_y = _units(x), _units(y)
    if any(units_y.get(n, u) != u for n, u in units_x.items()):
        return True  # a unit's case is its meaning
    words_y = _word_cases(y, strict)
    ambiguous: set[int] = set()  # the side (0: x, 1: y) typing a word-like name in lower case
    careless: set[int] = set()  # the side typing a name that is no word in lower case
    for word, (typed_x, capitals_x) in _word_cases(x, strict).items():
        found = words_y.get(word)
        if found is None or not typed_x or not found[0] or found[0] == typed_x:
            continue
        typed_y, capitals_y = found
        if strict and (len(word) <= 2 or is_lower_case_word(word)):
            return True  # "what does IT mean" / "what does it mean"; not "VPN" / "vpn"
        if len(word) <= 2 and any(_mixed(t) for t in typed_x | typed_y) and not titled:
            return True  # a unit or a symbol: mW / MW, Co / CO, mL / ml (not "Is", "To")
        if len(capitals_x) != 1 or len(capitals_y) != 1 or capitals_x == capitals_y:
            continue  # a capital against a capital, or a sentence's first word
        side = 1 if True in capitals_x else 0
        word_like = len(word) <= 2 or is_lower_case_word(word)  # "ms" / "MS", "us" / "US"
        if word in _PRONOUNS and _after_article(word, (x, y)[side]):
            word_like = False  # "a us passport": no pronoun follows an article
        (ambiguous if word_like else careless).add(side)
    return told and bool(ambiguous - careless)


_PRONOUNS = frozenset("us it me him her them we i you".split())


def _acronym_against_name(x: str, y: str) -> bool:
    """A word of two or three letters in capitals in ``x`` (an acronym: MAC, WHO, ICE,
    unless ``x`` is typed in capitals throughout) that ``y`` capitalizes, when it is also an
    ordinary word (Mac, Who, Ice: a name or a sentence's first word; not Cpu, Nba)."""
    words_x = _LATIN.findall(x)
    if len(words_x) > 1 and all(w.isupper() for w in words_x):
        return False  # "WHAT IS A MAC ADDRESS": capitals tell nothing here
    acronyms = {w for w in words_x if 2 <= len(w) <= 3 and w.isupper()}
    return any(
        w.upper() in acronyms and is_lower_case_word(w.lower())
        for w in _LATIN.findall(y)
        if w[0].isupper() and w[1:].islower()
    )


_LATIN = re.compile(r"[A-Za-z]+")


def _lone_letter_case(x: str, y: str) -> bool:
    """A Latin letter standing alone on both sides (a key, a flag, a grade, a variable) typed
    in another case on one: a letter's case is its meaning.  In Latin text the pronoun "I"
    and the article "a" are grammar's, and so is the capital of a sentence's first word."""
    letters_x, letters_y = _letters(x), _letters(y)
    return any(
        {t for t in letters_x if t.lower() == letter}
        != {t for t in letters_y if t.lower() == letter}
        for letter in {t.lower() for t in letters_x} & {t.lower() for t in letters_y}
    )


def _letters(text: str) -> list[str]:
    latin = not CJK.search(text)
    found = []
    for m in _LONE_LETTER.finditer(text):
        letter, before = m.group(), text[: m.start()].rstrip()
        if latin and before[-1:] != "-" and letter in "IiAa":
            continue  # "can i", "a dog" (but "ls -a" / "ls -A")
        if latin and letter.isupper() and (not before or before[-1] in ".!?"):
            continue  # "O is …" opens a sentence
        found.append(letter)
    return found


_LONE_LETTER = re.compile(r"(?<![A-Za-z])[A-Za-z](?![A-Za-z])")


def _after_article(word: str, text: str) -> bool:
    return (
        re.search(rf"(?<![\w'])(?:a|an|the)\s+{re.escape(word)}(?![\w'])", text, re.I) is not None
    )


_UNIT = re.compile(rf"(?<!{_ALNUM})(\d+(?:[.,]\d+)?) ?((?:(?!\d){_ALNUM})+)")


def _units(text: str) -> dict[str, str]:
    """The word right after each number, as typed."""
    return {m.group(1): m.group(2) for m in _UNIT.finditer(text)}


def _mixed(word: str) -> bool:
    return word != word.lower() and word != word.upper()


@lru_cache(maxsize=20_000)
def _word_cases(
    text: str, strict: bool = False
) -> Mapping[str, tuple[frozenset[str], frozenset[bool]]]:
    """Each Latin word (folded), with how it is typed and whether each time with a capital,
    both where its case is its own: a capital that starts a sentence, and the pronoun "I"
    (typed "i" as often), are grammar's and left out (``strict``, in a question about words:
    only the first word's, when it opens a question: "What", "How", "Define" …).  Memoized
    (read-only): a stored question is compared with every question asked near it."""
    typed: dict[str, set[str]] = {}
    capitals: dict[str, set[bool]] = {}
    sentence_start = not CJK.search(text)  # (Chinese text capitalizes no sentence: "Co中毒")
    for m in _PIECE.finditer(_FINAL.sub("", text)):
        piece = m.group()
        if piece[0].isalpha() and not CJK.match(piece):
            word = piece.lower()
            forms, flags = typed.setdefault(word, set()), capitals.setdefault(word, set())
            grammar = sentence_start and piece[1:] == piece[1:].lower()
            if strict:  # a question about words: only an opener's capital is grammar's
                grammar = grammar and word in _OPENERS
            if piece not in ("I", "i") and not grammar:
                forms.add(piece)
                flags.add(any(c.isupper() for c in piece))
        if piece[0].isalnum():
            sentence_start = False
        elif piece in _SENTENCE_ENDS and not strict:
            sentence_start = True
    return MappingProxyType({w: (frozenset(typed[w]), frozenset(capitals[w])) for w in typed})


_PIECE = re.compile(rf"(?:(?!\d){_ALNUM})+|\d+|\S")
_OPENERS = frozenset(
    "what how why when where who which is are do does did can could should would will please "
    "tell define explain translate use give".split()
)
_SENTENCE_ENDS = frozenset(".!?。！？")  # not ":": "Define: Polish" is no sentence start
