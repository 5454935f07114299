"""python -m pytest_fusion merge A.json B.json ... --html out.html [--json out.json]
python -m pytest_fusion compare OLD.json NEW.json --fail=kernels:0,bytes:2%,speedup:-5%

Exit status: 0 fine, 1 a compare gate failed, 2 usage error (bad arguments or a
file that is not a report)."""
from __future__ import annotations

import argparse
import sys

from .report import compare as cmp
from .report import schema
from .report.html import write_html
from .report.merge import merge


def _merge(args) -> int:
    if not args.html and not args.json:
        raise SystemExit("merge: say where to write: --html PATH and/or --json PATH")
    doc, notes = merge([(p, schema.load(p)) for p in args.reports])
    for note in notes:
        print(f"note: {note}", file=sys.stderr)
    if args.json:
        schema.dump(doc, args.json)
        print(f"JSON: {args.json}")
    if args.html:
        write_html(doc, args.html)
        print(f"HTML: {args.html}")
    s = doc["summary"]
    print(f"{len(doc['tests'])} tests from {len(args.reports)} reports: {s['passed']} passed, "
          f"{s['failed']} failed, {s['errors']} errors, {s['skipped']} skipped")
    return 0


def _compare(args) -> int:
    limits = cmp.parse_fail(args.fail)
    result = cmp.compare(schema.load(args.old), schema.load(args.new), limits)
    print(f"compare {args.old} -> {args.new}")
    print(cmp.format_table(result, args.all))
    return 1 if result.failures else 0


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m pytest_fusion", description="pytest-fusion report tools")
    sub = parser.add_subparsers(dest="command", required=True)
    m = sub.add_parser("merge", help="merge reports (shards, xdist workers, machines) into one")
    m.add_argument("reports", nargs="+", metavar="REPORT.json")
    m.add_argument("--html", metavar="PATH", help="write the merged HTML report")
    m.add_argument("--json", metavar="PATH", help="write the merged JSON report")
    m.set_defaults(run=_merge)
    c = sub.add_parser("compare", help="compare two reports; exit 1 when a limit is exceeded")
    c.add_argument("old", metavar="OLD.json")
    c.add_argument("new", metavar="NEW.json")
    c.add_argument("--fail", default="kernels:0,launches:0,bytes:0%",
                   help=f"METRIC:LIMIT[,...]; LIMIT a number or N%%; metrics: {', '.join(cmp.METRICS)} "
                        "(default: %(default)s)")
    c.add_argument("--all", action="store_true", help="show unchanged metrics too")
    c.set_defaults(run=_compare)
    args = parser.parse_args(argv)
    try:
        return args.run(args)
    except (schema.SchemaError, cmp.SpecError, OSError) as e:
        print(f"error: {e}", file=sys.stderr)
        return 2


if __name__ == "__main__":
    sys.exit(main())
