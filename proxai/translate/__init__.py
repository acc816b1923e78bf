"""Protocol translation: a client API's request and stream over an upstream of another API.

Sans-io throughout. ``requests/`` turns a client request into the upstream's
(and builds the :class:`~proxai.translate.ir.TranslationContext`);
``decoders/`` turn an upstream's stream or body into neutral events
(:mod:`proxai.translate.ir`); ``encoders/`` turn events into the client's
stream or body. :mod:`proxai.translate.pairs` lists the pairs proxai serves.
"""
