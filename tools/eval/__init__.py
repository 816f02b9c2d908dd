"""Evaluations: quality figures of a component on generated inputs, saved as JSON under bench/results/."""
