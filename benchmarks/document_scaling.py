"""Time per byte of reading a document as its input doubles: every step of `--format html` (parse, blocks, the
re-reading after a parse error, the placement of inline tags through the alignment) and sentence splitting must be
linear, so that no input can make a request's work grow faster than its size.

Each shape is generated at a base size and doubled five times (x1 .. x32); the HTML shapes go through
`nmt.text.markup.translate_html` with a stand-in translation (each text as it is, aligned word for word: what the
placement of inline tags costs, without a model), the text shapes through `nmt.text.sentences.split_sentences`.
Prints, per shape, the microseconds per kilobyte at each size and the ratio of the largest to the smallest: about 1
for linear work, 32 for quadratic.

    python benchmarks/document_scaling.py [--base-kb 8] [--repeats 3]
"""

from __future__ import annotations

import argparse
import platform
import time
from typing import Callable

from nmt.text.markup import Aligned, translate_html
from nmt.text.sentences import split_sentences


def identity(texts: list[str]) -> list[Aligned]:
    """Each text as its own translation, word i aligned to word i."""
    return [Aligned(t, [(i, i) for i in range(len(t.split()))]) for t in texts]


def repeat(unit: str, size: int) -> str:
    return unit * max(1, size // len(unit))


def nested(size: int) -> str:
    """<div> and <span> nested deep, then closed: the open-element stacks at their bounds."""
    depth = max(1, size // 24)
    return "<div><span>" * depth + "Ein Wort." + "</span></div>" * depth


SHAPES: dict[str, tuple[str, Callable[[int], str]]] = {
    "empty blocks": ("html", lambda n: repeat("<p> </p>\n", n)),
    "bad declarations": ("html", lambda n: repeat("<![x]>\n", n)),
    "deep nesting": ("html", nested),
    "inline tags": ("html", lambda n: "<p>" + repeat("A <b>man</b> rides a <i>bike</i>. ", n) + "</p>"),
    "long text node": ("html", lambda n: "<p>" + repeat("A man rides a bike. ", n) + "</p>"),
    "less-than signs": ("html", lambda n: "<p>" + repeat("a < b ", n) + "</p>"),
    "sentences, Latin": ("text", lambda n: repeat("Go. ", n)),
    "sentences, ideographic stops": ("text", lambda n: repeat("Hund。", n)),
    "no stop at all": ("text", lambda n: repeat("word ", n)),
}


def seconds(kind: str, text: str, repeats: int) -> float:
    best = float("inf")
    for _ in range(repeats):
        start = time.perf_counter()
        if kind == "html":
            translate_html(text, identity)
        else:
            split_sentences(text, "de" if "Hund" in text else "en")
        best = min(best, time.perf_counter() - start)
    return best


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--base-kb", type=int, default=8, help="the smallest input, in KB")
    parser.add_argument("--repeats", type=int, default=3, help="runs per size (the fastest counts)")
    args = parser.parse_args()
    print(f"# {platform.processor() or platform.machine()}, Python {platform.python_version()}; microseconds per KB")
    sizes = [args.base_kb * 1024 * 2**k for k in range(6)]
    print("| shape | " + " | ".join(f"{s // 1024} KB" for s in sizes) + " | x32 / x1 |")
    print("|---|" + "---:|" * (len(sizes) + 1))
    for name, (kind, make) in SHAPES.items():
        per_kb = []
        for size in sizes:
            text = make(size)
            per_kb.append(seconds(kind, text, args.repeats) * 1e6 / (len(text.encode()) / 1024))
        print(f"| {name} | " + " | ".join(f"{v:,.0f}" for v in per_kb) + f" | {per_kb[-1] / per_kb[0]:.2f} |",
              flush=True)


if __name__ == "__main__":
    main()
