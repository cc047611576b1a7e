"""Human-in-the-loop: interventions, rewind-and-correct, the actor/learner split, correction sessions."""
