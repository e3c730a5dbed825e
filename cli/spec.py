"""`marketplace spec`: a model's data-spec, its example row, or a CSV template, from the server."""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

from cli.connection import handles_errors, make_client
from cli.terminal import note


@handles_errors
def cmd_spec(args: argparse.Namespace) -> int:
    with make_client(args) as client:
        if args.format == "csv":
            text = client.example(args.model_id, "csv")
        elif args.example:
            text = json.dumps(json.loads(client.example(args.model_id)), indent=2) + "\n"
        else:
            text = json.dumps(client.data_spec(args.model_id), indent=2) + "\n"
    if args.output:
        Path(args.output).write_text(text, encoding="utf-8")
        note(f"wrote {args.output}")
    else:
        sys.stdout.write(text)
    return 0
