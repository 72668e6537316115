"""TF-Agents' own tests, vendored unchanged except for the import (see each file)."""
