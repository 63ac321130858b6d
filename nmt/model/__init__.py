"""The network and its weights on disk: the Transformer, bottom-up (its layers in `layers`, the
encoder-decoder model in `transformer`), its training loss (`loss`), the typed, versioned `Checkpoint`
(`checkpoint`) and the vocabulary shortlist it may carry (`shortlist`).
"""
