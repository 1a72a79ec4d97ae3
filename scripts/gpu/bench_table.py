"""The table of a ``bench --json`` file, as the benchmark prints it without --json."""

import json
import sys
from pathlib import Path

import pandas as pd

from tiedvsuntied.bench import format_table

result = json.loads(Path(sys.argv[1]).read_text())
table = pd.DataFrame(result["rows"])
print(format_table(table, result["peak_tflops"], result["datasheet_bf16_tflops"]))
