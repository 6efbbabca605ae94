"""Operator implementations and the operator contract (see ``base.Operator``)."""
