"""What the check feeds the models: given or seeded arrays, the plan of dims that respect
the relations the graph states, the dims the second model pins, and how each value depends on
the graph's inputs."""
