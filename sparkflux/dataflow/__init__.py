"""The user-facing dataflow API and the compiler to a physical plan."""
