"""An engine's logged figures explained: the replay of the same requests under each wiring an
engine may feed, the verdict (the draft as it is, the wrong wiring and its fix, an engine-side
fault, undecided) and the evidence that settles it. `pipeline.reconcile` gives one log's verdict;
`entry.run_reconcile_request` is the whole run a view calls (the settings as a `request`, the
replays or the live loop of `replays`, every log, the runs compared)."""
