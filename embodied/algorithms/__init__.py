"""The algorithm core: pure tensor functions (advantages, losses) and the algorithms built from them."""
