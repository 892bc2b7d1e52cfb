"""Languages for both interfaces and the digest mail: gettext catalogs and the tools that keep
them whole (``catalogs``, ``translation_status``), how each language writes numbers and dates
(``numerals``), reading a browser's languages (``negotiation``) and one language of one
catalogue as pages and mails use it (``speech``). It knows no interface: each says where its
catalogue lives and which languages it ships."""
