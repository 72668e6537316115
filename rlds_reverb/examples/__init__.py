"""Examples: the embedded CartPole dataset and its scripted controller, synthetic benchmark
data, and the demo agent (offline CQL-DQN on the CartPole data, fed only from Reverb)."""
