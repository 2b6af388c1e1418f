"""Neural-network lowerings: softmax and losses (functional.py), fused attention, layer norm, convolution and
batch norm, pooling, CTC, recurrent cells, the transformer fast path, distances, resampling."""
