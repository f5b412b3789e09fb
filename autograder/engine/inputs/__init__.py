"""What the checks share: seeded tensors (``seeded``), the weights and arguments of module cases
(``modules``), and the real SmolLM2 model with real text (``smollm2``)."""
