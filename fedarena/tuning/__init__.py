"""Fair tuning (``fedarena tune``): every row of a suite gets the same budget of configurations, searched by Ray
Tune against the worst case of the battery's tuning attacks on benign validation data (``search.py``)."""
