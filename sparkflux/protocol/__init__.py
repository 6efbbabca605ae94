"""Sans-I/O protocol cores: ingress, egress (and, with replication, FH-Prod / FH-Cons)."""
