"""What the commands run end to end, below the command line: `demo` (the pipeline on the bundled
sample), `preparing`, `training_run`, `model_files` (average, import), `shortlisting`, `translation`,
`evaluation`, and what every command shares: `paths` (what each command reads and writes), `threads`
(torch's CPU threads).
"""
