"""The `nmt` command: typer shells over the library. `main` (the app, the error boundary, the entry
point), `commands` (one module per command), `guard` and `paths` (the path rule before a command runs, and what
each command reads and writes), `options` (the options built from the config declarations), `stdio` and `render`
(what goes to stdout), `console` (progress and logs on stderr).
"""
