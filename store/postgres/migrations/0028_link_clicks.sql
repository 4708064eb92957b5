-- 0028: clicks on tracked links, as store/sqlite's 0028: one row per
-- notification and link, counted, written by the click redirect; a
-- workflow step's `clicked` condition reads it. Prune deletes a
-- notification's clicks with it.
CREATE TABLE link_clicks (
    notification bigint NOT NULL,
    url          text   NOT NULL,
    count        bigint NOT NULL,
    first_at     bigint NOT NULL, -- ms
    last_at      bigint NOT NULL, -- ms
    PRIMARY KEY (notification, url)
);
