"""``fedarena report SUITE``: one self-contained HTML page of a suite (``build``: every table and figure of
the leaderboards, the devices' accuracy spread (``devices``), and where every number came from
(``provenance``), laid out by ``page``)."""
