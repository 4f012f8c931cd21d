"""fedarena: a benchmark harness for fair and robust federated learning."""

__version__ = "0.1.0"
