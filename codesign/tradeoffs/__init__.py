"""Trade-offs an architect asks for: exact Pareto frontiers between two metrics."""
