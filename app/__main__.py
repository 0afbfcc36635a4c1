"""``python -m app`` runs the ``deja`` CLI."""

from app.cli import main

main()
