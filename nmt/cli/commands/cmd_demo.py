"""`nmt demo`: the whole pipeline on the bundled sample corpus."""

from __future__ import annotations

from nmt.cli.options import with_config_options
from nmt.cli.render import scores_table
from nmt.cli.stdio import write_stdout
from nmt.config import Overrides
from nmt.config.command_options import DemoOptions

EPILOG = "Example: nmt demo --out nmt-demo"


@with_config_options({"given": DemoOptions})
def demo_command(given: Overrides[DemoOptions]) -> None:
    """Run the whole pipeline on the bundled sample corpus: bpe, prepare, train, average, translate, eval."""
    from nmt.cli.console import progress_display, say
    from nmt.workflows.demo import run_demo
    from nmt.workflows.threads import set_threads

    o = given.apply()
    set_threads(o.threads)
    with progress_display() as report:
        result = run_demo(o.out, max_updates=o.max_updates, progress=report)
    say("\nSample translations (test set):")
    write_stdout("".join(f"SRC  {src}\nHYP  {hyp}\nREF  {ref}\n\n" for src, hyp, ref in result.samples)
                 + scores_table(result.scores))
    say(f"demo finished in {result.seconds:.0f}s; everything is in {o.out}")
