"""Where the downloaded datasets' files come from and how they are read: the data directory and its errors
(``storage``), what files a dataset needs and how to check them (``sources``), downloading (``fetch``,
``torchvision``: the files torchvision fetches), the on-disk formats (``idx``: MNIST/Fashion-MNIST,
``cifar``: CIFAR-10 batches, ``leaf``: LEAF JSON) and the partition cache (``cache``). The datasets
themselves are the modules one folder up."""
