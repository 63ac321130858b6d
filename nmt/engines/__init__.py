"""The engines that translate sentences, one concept in one place: what every engine shares, the `Engine`
protocol and `BatchEngine` (`base`); the torch engine (`torch_engine`) with its search (`search`), ensembles
(`ensemble`) and attention maps and alignments (`heatmaps`); the CTranslate2 engine (`ct2_engine`), the export it
reads (`ct2_export`) and the cache of conversions (`conversions`); the decoding options both engines read
(`decoding`); and the choice between the engines, `--engine` (`choice`).
"""
