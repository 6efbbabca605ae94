"""The Nexmark benchmark (online auctions: persons, auctions, bids) as sparkflux dataflows.

    sparkflux run examples/nexmark/nexmark.py --query 5 --events 1000000 --sites 4
    sparkflux reference examples/nexmark/nexmark.py --query 5 --events 1000000

``--query`` picks one of Q0-Q5, Q7, Q8 or ``bidders`` (``queries.py`` says what each
computes and holds its Spark SQL reference); ``generator.py`` makes the three streams from
(seed, event number). ``bench/nexmark.py`` runs them all.
"""

from __future__ import annotations

import argparse

from queries import BUILDERS, QUERIES, NexmarkOptions, reference  # noqa: F401

from sparkflux.dataflow.api import Dataflow


def add_options(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--query", type=_query, default=0, choices=QUERIES,
                        help="Nexmark query: 0-5, 7, 8, or bidders")
    parser.add_argument("--seed", type=int, default=7, help="workload seed")
    parser.add_argument("--event-rate", type=int, default=10_000,
                        help="events per second of event time (the generator's clock)")
    parser.add_argument("--retention", type=int, default=60_000,
                        help="Q3: ms a person and an auction may be apart and still join")


def _query(text: str) -> int | str:
    return int(text) if text.isdigit() else text


def options(args: argparse.Namespace) -> NexmarkOptions:
    return NexmarkOptions(query=args.query, events=args.events, seed=args.seed,
                          rate=args.event_rate, retention=args.retention)


def build(o: NexmarkOptions) -> Dataflow:
    df = Dataflow(f"nexmark_q{o.query}")
    BUILDERS[o.query](df, o)
    return df
