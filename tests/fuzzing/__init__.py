"""Helpers of the model fuzzer (tests/integration/test_model_fuzz.py): the grammar of
target shapes, configs and records, and the driver of the real sink."""
