"""The wiring the weights were trained on, asked of the weights (`search`, `trained`,
`fingerprint`), the wirings quoted by name (`named`), and what an engine feeds a draft
(`engine_reading`, `engine_run`, `fed_states`); a block draft's trained layers
(`block_search`)."""
