"""Translation: greedy and beam search over a protocol (`search`), ensembles, the torch engine and what
every engine shares (`translator`), the decoding options and how each engine and the server read them
(`decoding`), the CTranslate2 export (`ct2_export`) and engine (`ct2_engine`) with its cached conversions
(`conversions`), the `Engine` protocol and `--engine` (`engines`), attention heatmaps (`heatmaps`) and
sacreBLEU scoring (`evaluate`).
"""
