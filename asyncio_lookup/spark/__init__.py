"""The PySpark adapter: ``LookupTable``, ``lookup_join``, ``async_map``."""

__all__: list[str] = []
