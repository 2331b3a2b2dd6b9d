"""Facts of the machine: CPU and memory, measured memory bandwidth, and the roofline that turns
both into the speed a model can reach here."""
