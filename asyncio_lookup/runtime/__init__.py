"""The async wait operator (FLIP-232) and its DataStream-style API. Imports no Spark, no lookup."""

__all__: list[str] = []
