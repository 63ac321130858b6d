"""Text into subwords and back: the `Tokenizer` protocol and its kinds (youtokentome's BPE in `bpe`,
SentencePiece in `spm`), seeded subword sampling (`segment`), and the text a subword model learns from
(`corpus`); and what surrounds subwords: a line's sentences (`sentences`), the text of HTML and its tags
(`markup`), language names and detection (`languages`).
"""
