#!/usr/bin/env python3
"""Writes tests/text/bpe_golden.h: GPT-2 BPE encodings that tests/text/test_bpe.cpp checks.

The reference here is GPT-2's published encoding algorithm, written out below: the
pre-tokenization pattern run by the Python `regex` module, the byte-to-unicode alphabet,
and merges by rank (lowest-ranked pair first, all its occurrences left to right, repeat).
Texts are bytes; they are decoded with errors="surrogateescape", so every invalid UTF-8 byte
becomes one lone surrogate (neither a letter, a number nor a space for the pattern) and
encodes back to itself: the encoding of arbitrary bytes is then defined as the C++
tokenizer defines it (text/bpe.h).

    python3 tests/text/gen_bpe_golden.py .data/text/gpt2 > tests/text/bpe_golden.h

Needs the `regex` module (pip install regex) and GPT-2's encoder.json and vocab.bpe
(bash scripts/fetch_text_data.sh); the tests need neither Python nor regex.
"""

import json
import os
import random
import sys

import regex

PATTERN = regex.compile(
    r"""'s|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+"""
)


def byte_alphabet():
    printable = (
        list(range(ord("!"), ord("~") + 1))
        + list(range(ord("\xa1"), ord("\xac") + 1))
        + list(range(ord("\xae"), ord("\xff") + 1))
    )
    table, extra = {}, 0
    for b in range(256):
        if b in printable:
            table[b] = chr(b)
        else:
            table[b] = chr(256 + extra)
            extra += 1
    return table


class Gpt2Reference:
    def __init__(self, folder):
        with open(os.path.join(folder, "encoder.json"), encoding="utf-8") as f:
            self.encoder = json.load(f)
        with open(os.path.join(folder, "vocab.bpe"), encoding="utf-8") as f:
            lines = f.read().split("\n")[1:-1]
        self.ranks = {tuple(line.split(" ")): i for i, line in enumerate(lines)}
        self.alphabet = byte_alphabet()

    def merge(self, symbols):
        word = list(symbols)
        while len(word) > 1:
            pairs = {(word[i], word[i + 1]) for i in range(len(word) - 1)}
            best = min(pairs, key=lambda p: self.ranks.get(p, float("inf")))
            if best not in self.ranks:
                break
            merged, i = [], 0
            while i < len(word):
                if i + 1 < len(word) and (word[i], word[i + 1]) == best:
                    merged.append(word[i] + word[i + 1])
                    i += 2
                else:
                    merged.append(word[i])
                    i += 1
            word = merged
        return word

    def encode(self, data):
        text = data.decode("utf-8", errors="surrogateescape")
        ids = []
        for piece in PATTERN.findall(text):
            raw = piece.encode("utf-8", errors="surrogateescape")
            symbols = "".join(self.alphabet[b] for b in raw)
            ids.extend(self.encoder[t] for t in self.merge(symbols))
        return ids

    def pieces(self, data):
        text = data.decode("utf-8", errors="surrogateescape")
        return [p.encode("utf-8", errors="surrogateescape") for p in PATTERN.findall(text)]


SHAKESPEARE = (
    b"First Citizen:\nBefore we proceed any further, hear me speak.\n\n"
    b"All:\nSpeak, speak.\n\nFirst Citizen:\nYou are all resolved rather to die than to "
    b"famish?\n"
)

CASES = [
    ("hello_world", b"Hello world"),
    ("empty", b""),
    ("single_space", b" "),
    ("shakespeare", SHAKESPEARE),
    ("contractions", b"I'll say you're sure he's right; we've seen I'm here, she'd know, don't."),
    ("contractions_upper", b"DON'T WE'LL 'S 'T 'Re 'vE"),
    ("contraction_starts", b"'sup 'tis 'll've ''s '"),
    ("numbers", b"3.14159 1234567890 10,000 2024-11-28 0x1F 1e-5 42nd"),
    ("whitespace_runs", b"a  b   c\t\td\n\n\ne \r\n f   \n  g     "),
    ("leading_trailing", b"   leading and trailing   "),
    ("only_newlines", b"\n\n\n\n"),
    ("space_before_punct", b"Wait ... what ?! (yes) [no] {maybe} -- ok"),
    ("code", b"def f(x):\n    return x**2  # square\n\tprint(f'{x=}')\n"),
    ("latin1", "na\u00efve caf\u00e9 r\u00e9sum\u00e9 Gr\u00fc\u00dfe \u00a1Hola! se\u00f1or".encode()),
    ("cyrillic_greek", "\u041f\u0440\u0438\u0432\u0435\u0442 \u043c\u0438\u0440 \u0393\u03b5\u03b9\u03ac \u03c3\u03bf\u03c5".encode()),
    ("cjk", "\u4eca\u65e5\u306f\u3001\u4e16\u754c\uff01 \u4f60\u597d\uff0c\u4e16\u754c\u3002 \ud55c\uad6d\uc5b4".encode()),
    ("arabic_hindi", "\u0645\u0631\u062d\u0628\u0627 \u0661\u0662\u0663 \u0928\u092e\u0938\u094d\u0924\u0947 \u0967\u0968".encode()),
    ("emoji", "I \u2764\ufe0f tide \U0001F680\U0001F680 \U0001F44D\U0001F3FD \U0001F468\u200d\U0001F469\u200d\U0001F467 \U0001F1EB\U0001F1F7".encode()),
    ("unicode_numbers", "\u00bd \u2153 \u2167 \u2460\u2461 x\u00b2 \u0664\u0665 \U0001D7D8".encode()),
    ("unicode_spaces", "a\u00a0b\u2003c\u3000d \u2028e\u0085f\u200bg".encode()),
    ("control_bytes", b"\x00\x01\x1c\x1d\x1e\x1f\x7f tab\x0bvt\x0cff"),
    ("endoftext_text", b"<|endoftext|> is plain text here"),
    ("long_letters", b"a" * 300 + b" " + b"ab" * 150),
    ("long_spaces", b"x" + b" " * 200 + b"y" + b"\n" * 40),
    ("long_digits", b"9" * 120),
    ("invalid_utf8", b"\xff\xfe bad \xc0\xaf overlong \xed\xa0\x80 surrogate \xf4\x90\x80\x80 big"),
    ("truncated_utf8", b"cut \xe2\x82 here \xf0\x9f\x98 and\xc3"),
    ("lone_continuations", b"\x80\x81 a\xbf b \xc3\xa9\x80"),
    ("latin1_bytes", "caf\u00e9 na\u00efve".encode("latin-1")),
]


def random_cases():
    rng = random.Random(20261128)
    out = []
    for i in range(4):
        n = rng.randint(40, 160)
        out.append((f"random_bytes_{i}", bytes(rng.randrange(256) for _ in range(n))))
    alphabet = [b"a", b"b", b" ", b"'", b"s", b"1", b"\n", b"\xc3\xa9", b"\xe2\x80\x99", b"\xff", b"."]
    for i in range(4):
        out.append((f"random_mix_{i}", b"".join(rng.choice(alphabet) for _ in range(rng.randint(30, 120)))))
    return out


def cpp_bytes(data):
    # Octal escapes stop after three digits, so no following character extends them.
    out = []
    for b in data:
        c = chr(b)
        if c == '"' or c == "\\":
            out.append("\\" + c)
        elif 0x20 <= b < 0x7F and c != "?":
            out.append(c)
        else:
            out.append(f"\\{b:03o}")
    return '"' + "".join(out) + '"sv'


def wrap(items, indent, width=100):
    lines, line = [], indent
    for item in items:
        piece = item + ", "
        if len(line) + len(piece) > width and line.strip():
            lines.append(line.rstrip())
            line = indent
        line += piece
    if line.strip():
        lines.append(line.rstrip())
    return lines


def chunks(s, n):
    # A C++ string literal split into pieces of at most n source characters, never inside
    # an escape.
    parts, cur = [], ""
    i = 0
    body = s[1:-3]
    tokens = []
    while i < len(body):
        if body[i] == "\\":
            step = 4 if body[i + 1].isdigit() else 2
        else:
            step = 1
        tokens.append(body[i : i + step])
        i += step
    for t in tokens:
        if len(cur) + len(t) > n:
            parts.append(cur)
            cur = ""
        cur += t
    parts.append(cur)
    return parts


def main():
    if len(sys.argv) != 2:
        raise SystemExit("usage: gen_bpe_golden.py GPT2_DIR > tests/text/bpe_golden.h")
    ref = Gpt2Reference(sys.argv[1])
    cases = CASES + random_cases()
    assert ref.encode(b"Hello world") == [15496, 995]
    out = [
        "// @generated by tests/text/gen_bpe_golden.py from GPT-2's encoder.json and vocab.bpe",
        f"// with the Python regex module {regex.__version__}; do not edit.",
        "// GPT-2 BPE ids of byte strings (non-ASCII, emoji, numbers, contractions, white space",
        "// runs, invalid UTF-8) by the reference algorithm in that script; read by test_bpe.cpp.",
        "#pragma once",
        "",
        "#include <cstdint>",
        "#include <string_view>",
        "#include <vector>",
        "",
        "namespace tide::text::golden {",
        "",
        "using namespace std::string_view_literals;",
        "",
        "struct BpeCase {",
        "  const char* name;",
        "  std::string_view text;",
        "  std::vector<int32_t> ids;",
        "  std::vector<size_t> piece_ends;  // byte offsets where the pattern's pieces end",
        "};",
        "",
        "// clang-format off",
        "inline const std::vector<BpeCase> kBpeCases = {",
    ]
    for name, data in cases:
        ids = ref.encode(data)
        ends, pos = [], 0
        for p in ref.pieces(data):
            pos += len(p)
            ends.append(pos)
        assert pos == len(data)
        out.append(f'    {{"{name}",')
        lit = cpp_bytes(data)
        parts = chunks(lit, 86)
        for k, part in enumerate(parts):
            suffix = '"sv,' if k == len(parts) - 1 else '"'
            out.append(f'     "{part}{suffix}')
        out.append("     {" + ("" if ids else "},"))
        if ids:
            out.extend(wrap([str(i) for i in ids], "      "))
            out.append("     },")
        out.append("     {" + ("" if ends else "}},"))
        if ends:
            out.extend(wrap([str(e) for e in ends], "      "))
            out.append("     }},")
    out += ["};", "// clang-format on", "", "}  // namespace tide::text::golden", ""]
    sys.stdout.write("\n".join(out))


if __name__ == "__main__":
    main()
