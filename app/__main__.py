"""``python -m app`` runs the ``deja`` CLI."""

from app.cli.main import main

main()
