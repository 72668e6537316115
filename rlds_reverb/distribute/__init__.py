"""Beyond one machine: an Apache Beam pipeline pushing RLDS datasets into several Reverb servers."""
