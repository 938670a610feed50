# The one image every deploy/ manifest runs: egret (gateway, controller, steer) and the
# egress-router CNI plugin with its installer. The XDP program's object file is committed
# (gateway/xdp), so the build needs no clang.
FROM golang:1.26-bookworm AS build
WORKDIR /src
COPY go.mod go.sum ./
RUN go mod download
COPY . .
ARG VERSION=dev
RUN CGO_ENABLED=0 go build -trimpath -ldflags "-s -w -X main.version=${VERSION}" -o /out/egret ./cmd/egret && \
    CGO_ENABLED=0 go build -trimpath -ldflags "-s -w" -o /out/egress-router ./cmd/egress-router

FROM gcr.io/distroless/static-debian12
COPY --from=build /out/egret /out/egress-router /usr/local/bin/
ENTRYPOINT ["/usr/local/bin/egret"]
