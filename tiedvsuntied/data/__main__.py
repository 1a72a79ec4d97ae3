"""``python -m tiedvsuntied.data``: prepare (tokenize and cache) a corpus and print its info as
JSON (docs/data.md, "CLI"). Clusters run it once where the network is; compute nodes need none."""

from __future__ import annotations

import argparse
import json
import os
import sys
import tempfile
import time
from collections.abc import Sequence

from tiedvsuntied.data.cache import prepare_data
from tiedvsuntied.data.config import DataConfig, DataError, DataUnavailableError
from tiedvsuntied.presets import default_choice, presets


def load_config(preset: str, overrides: Sequence[str] = ()) -> DataConfig:
    """conf/data/<preset>.yaml + key=value overrides (as Hydra's; the 'data.' prefix optional)."""
    from omegaconf import OmegaConf
    from omegaconf.errors import OmegaConfBaseException

    found = presets("data")
    if preset not in found:
        raise DataError(f"no data preset {preset!r}; valid: {sorted(found)}")
    try:
        conf = OmegaConf.merge(
            OmegaConf.structured(DataConfig),
            found[preset],
            OmegaConf.from_dotlist([o.removeprefix("data.") for o in overrides]),
        )
        return OmegaConf.to_object(conf)
    except OmegaConfBaseException as e:
        raise DataError(f"data.{getattr(e, 'full_key', '?')}: {str(e).splitlines()[0]}") from None


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m tiedvsuntied.data",
        description="Prepare (tokenize + cache) a corpus; print its info as JSON.",
    )
    default = default_choice("data")  # the run's default corpus
    parser.add_argument("preset", nargs="?", default=default, help="conf/data/<preset>.yaml")
    parser.add_argument("overrides", nargs="*", help="key=value overrides of DataConfig fields")
    fresh = "tokenize into a temporary cache (deleted afterwards): measures throughput"
    parser.add_argument("--fresh", action="store_true", help=fresh)
    args = parser.parse_args(argv)
    if "=" in args.preset:  # overrides only: the default preset
        args.overrides, args.preset = [args.preset, *args.overrides], default
    try:
        cfg = load_config(args.preset, args.overrides)
        with tempfile.TemporaryDirectory(prefix="tiedvsuntied-fresh-") as tmp:
            cfg.cache_dir = tmp if args.fresh else cfg.cache_dir
            started = time.perf_counter()
            info = prepare_data(cfg).info()
            wall = time.perf_counter() - started
    except (DataError, DataUnavailableError) as e:
        print(f"error: {e}", file=sys.stderr)
        return 2
    n = sum(info["n_tokens"][s] for s in info["built_now"])
    print(
        f"tokenized {n:,} tokens ({', '.join(info['built_now']) or 'none: cached'}) of {cfg.name} "
        f"in {wall:.2f} s wall, loading included: {n / wall / 1e6:.2f}M tokens/s; "
        f"{info['num_threads']['train']} threads, {os.cpu_count()} cores",
        file=sys.stderr,
    )
    print(json.dumps(info, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
