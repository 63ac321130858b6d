"""What the commands run end to end, below the command line: `demo` (the pipeline on the bundled
sample), `preparing`, `training_run`, `model_files` (average, import), `translation`, `evaluation`, and
`threads` (torch's CPU threads). Distillation's workflows live with it, in `nmt.distillation`.
"""
