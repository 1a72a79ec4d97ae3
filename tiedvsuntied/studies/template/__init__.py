"""A study to copy (README, "How to extend: a study"): tied vs untied at two sizes on the books,
each arm at the lr its check chose. Copy this folder to tiedvsuntied/studies/NAME/ and
conf/experiment/template.yaml to NAME.yaml beside it, rename, declare; then
    python -m tiedvsuntied.study NAME print lr nano     # the lr check's commands
    python -m tiedvsuntied.study NAME lr nano           # run it; then choose, grid nano, ...
"""

from tiedvsuntied.analysis.arms import head_arm as arm  # a run's arm (conf/arm), from its record
from tiedvsuntied.study.declare import Cell, Point, Study
from tiedvsuntied.study.rules import lr_rule

TEXT = {"budget_bytes": 2_000_000, "bytes_per_token": 3.8}  # the steps that read 2 MB of text

STUDY = Study(
    name="template",
    title="template: tied vs untied at two sizes (copy me)",
    experiment="template",  # conf/experiment/template.yaml
    sweep="template",  # the experiment's sweep: where the runs land
    points={"nano": Point("nano", **TEXT), "micro": Point("micro", **TEXT)},
    cells=(Cell("tied"), Cell("untied")),  # conf/arm/<arm>.yaml, each with an lr check
    tuned="optim.lr",
    grid="1e-3,2e-3,4e-3",  # the lr check's first grid; x2 beyond an edge till the best is inside
    choose=lr_rule(arm),  # the lr table from the sweep's seed-0 runs
    seeds="1,2,3",  # each arm's seeds at its lr (seed 0 ran in the lr check)
    floor_points=("nano",),  # the noise floor: seed 0 again at 2 threads
    bundles={"results": "template"},  # experiments/NAME/results <- results/NAME, once bundled
    order=("nano", "micro"),  # `all`'s points
)
