"""``python -m benchmarks [--quick] <scenario>... | all | list`` (``make bench`` runs ``all``)."""

from benchmarks.cli import main

raise SystemExit(main())
