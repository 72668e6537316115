"""The demo agent: offline CQL-DQN on the embedded CartPole data, fed only from Reverb."""
