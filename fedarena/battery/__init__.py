"""The standard threat battery: a fixed, versioned set of threats run the same way against every component,
and the robustness card it gives (``fedarena evaluate``, ``fedarena.evaluate``)."""
