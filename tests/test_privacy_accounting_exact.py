"""fedarena/privacy/accounting.py checked against its formulas, one behaviour per test: each test here kills
mutants the older tests let survive (make mutants MODULE=fedarena/privacy/accounting.py)."""
