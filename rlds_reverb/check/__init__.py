"""Check and describe RLDS datasets: validation rules, reports, bulk record checks, stats."""
