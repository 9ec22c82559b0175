"""Training data: sequence packing of engine games and the batch stream (random games or an
on-disk corpus) that runs ahead of the device."""
