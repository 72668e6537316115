"""Feeding learners: prioritized, mixed learner datasets, importance weights, priorities."""
