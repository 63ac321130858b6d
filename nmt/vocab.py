"""The special symbols every vocabulary of nmt has, in youtokentome's default places.

Defined here, below the tokenizer, so that the model, search and batching layers know them
without importing the tokenizer library.
"""

PAD, UNK, BOS, EOS = 0, 1, 2, 3
SPECIALS = (PAD, UNK, BOS, EOS)
