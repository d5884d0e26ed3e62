"""What a graph computes, without changing it: constness (given the op facts), symbolic dims, shape
inference, input shapes, expansion bounds, declines.
"""
