"""Pure attention operators (no module state); each keeps an obviously-correct reference twin."""
