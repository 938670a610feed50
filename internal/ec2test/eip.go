package ec2test

import (
	"encoding/xml"
	"fmt"
	"net/http"
	"net/url"
	"slices"
	"sort"
)

// Address is one Elastic IP of the fake cloud; ENI and PrivateIP are set
// while it is associated.
type Address struct {
	AllocationID  string
	PublicIP      string
	AssociationID string
	ENI           string
	PrivateIP     string
}

// AddAddress allocates an Elastic IP (unassociated unless a is).
func (s *Server) AddAddress(a Address) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.eips == nil {
		s.eips = map[string]*Address{}
	}
	s.eips[a.AllocationID] = &a
}

// Address returns a copy of one Elastic IP's current state.
func (s *Server) Address(allocationID string) Address {
	s.mu.Lock()
	defer s.mu.Unlock()
	return *s.eips[allocationID]
}

// eipByForm finds the Elastic IP named by AllocationId or PublicIp.
func (s *Server) eipByForm(form url.Values) (*Address, *apiErr) {
	if id := form.Get("AllocationId"); id != "" {
		if a, ok := s.eips[id]; ok {
			return a, nil
		}
		return nil, &apiErr{http.StatusBadRequest, "InvalidAllocationID.NotFound", fmt.Sprintf("The allocation ID '%s' does not exist", id)}
	}
	ip := form.Get("PublicIp")
	for _, a := range s.eips {
		if a.PublicIP == ip {
			return a, nil
		}
	}
	return nil, &apiErr{http.StatusBadRequest, "InvalidAddress.NotFound", fmt.Sprintf("The address '%s' does not exist.", ip)}
}

type associateResp struct {
	XMLName       xml.Name `xml:"AssociateAddressResponse"`
	Xmlns         string   `xml:"xmlns,attr"`
	RequestID     string   `xml:"requestId"`
	Return        bool     `xml:"return"`
	AssociationID string   `xml:"associationId"`
}

// associate is AssociateAddress in a VPC: an allocation (or public IP), a
// network interface and one of its private addresses (the primary when none
// is given). An address associated elsewhere moves only with
// AllowReassociation=true; otherwise Resource.AlreadyAssociated.
func (s *Server) associate(form url.Values) (any, *apiErr) {
	a, e := s.eipByForm(form)
	if e != nil {
		return nil, e
	}
	if form.Get("InstanceId") != "" {
		return nil, &apiErr{http.StatusBadRequest, "InvalidParameterCombination", "this server associates with network interfaces only"}
	}
	eni, e := s.eni(form)
	if e != nil {
		return nil, e
	}
	priv := form.Get("PrivateIpAddress")
	if priv == "" {
		priv = eni.Primary
	}
	if priv != eni.Primary && !slices.Contains(eni.IPv4, priv) {
		return nil, &apiErr{http.StatusBadRequest, "InvalidParameterValue", fmt.Sprintf("The specified private IP address %s is not assigned to network interface %s", priv, eni.ID)}
	}
	if a.AssociationID != "" && (a.ENI != eni.ID || a.PrivateIP != priv) && form.Get("AllowReassociation") != "true" {
		return nil, &apiErr{http.StatusBadRequest, "Resource.AlreadyAssociated", fmt.Sprintf("resource %s is already associated with associate-id %s", a.AllocationID, a.AssociationID)}
	}
	for _, o := range s.eips { // a private address has at most one Elastic IP
		if o != a && o.ENI == eni.ID && o.PrivateIP == priv {
			return nil, &apiErr{http.StatusBadRequest, "InvalidParameterValue", fmt.Sprintf("The private IP address %s already has Elastic IP %s", priv, o.PublicIP)}
		}
	}
	a.AssociationID = "eipassoc-" + requestID()[:17]
	a.ENI, a.PrivateIP = eni.ID, priv
	return associateResp{Xmlns: xmlns, RequestID: requestID(), Return: true, AssociationID: a.AssociationID}, nil
}

type disassociateResp struct {
	XMLName   xml.Name `xml:"DisassociateAddressResponse"`
	Xmlns     string   `xml:"xmlns,attr"`
	RequestID string   `xml:"requestId"`
	Return    bool     `xml:"return"`
}

func (s *Server) disassociate(form url.Values) (any, *apiErr) {
	id := form.Get("AssociationId")
	for _, a := range s.eips {
		if id != "" && a.AssociationID == id {
			a.AssociationID, a.ENI, a.PrivateIP = "", "", ""
			return disassociateResp{Xmlns: xmlns, RequestID: requestID(), Return: true}, nil
		}
	}
	return nil, &apiErr{http.StatusBadRequest, "InvalidAssociationID.NotFound", fmt.Sprintf("The association ID '%s' does not exist", id)}
}

type addressXML struct {
	PublicIP      string `xml:"publicIp"`
	AllocationID  string `xml:"allocationId"`
	Domain        string `xml:"domain"`
	AssociationID string `xml:"associationId,omitempty"`
	ENI           string `xml:"networkInterfaceId,omitempty"`
	OwnerID       string `xml:"networkInterfaceOwnerId,omitempty"`
	PrivateIP     string `xml:"privateIpAddress,omitempty"`
}

type describeAddressesResp struct {
	XMLName   xml.Name     `xml:"DescribeAddressesResponse"`
	Xmlns     string       `xml:"xmlns,attr"`
	RequestID string       `xml:"requestId"`
	Set       []addressXML `xml:"addressesSet>item"`
}

// describeAddresses answers for AllocationId.N and PublicIp.N (all when
// neither is given); a name that does not exist is an error, as in EC2.
func (s *Server) describeAddresses(form url.Values) (any, *apiErr) {
	var out []*Address
	for _, id := range list(form, "AllocationId") {
		a, e := s.eipByForm(url.Values{"AllocationId": {id}})
		if e != nil {
			return nil, e
		}
		out = append(out, a)
	}
	for _, ip := range list(form, "PublicIp") {
		a, e := s.eipByForm(url.Values{"PublicIp": {ip}})
		if e != nil {
			return nil, e
		}
		out = append(out, a)
	}
	if len(out) == 0 && len(list(form, "AllocationId"))+len(list(form, "PublicIp")) == 0 {
		for _, a := range s.eips {
			out = append(out, a)
		}
		sort.Slice(out, func(i, j int) bool { return out[i].AllocationID < out[j].AllocationID })
	}
	resp := describeAddressesResp{Xmlns: xmlns, RequestID: requestID()}
	for _, a := range out {
		x := addressXML{PublicIP: a.PublicIP, AllocationID: a.AllocationID, Domain: "vpc", AssociationID: a.AssociationID, ENI: a.ENI, PrivateIP: a.PrivateIP}
		if a.ENI != "" {
			x.OwnerID = "123456789012"
		}
		resp.Set = append(resp.Set, x)
	}
	return resp, nil
}

// dropAssociations disassociates the Elastic IPs of private addresses an
// unassign removed from eni, as EC2 does.
func (s *Server) dropAssociations(eni string, ips []string) {
	for _, a := range s.eips {
		if a.ENI == eni && slices.Contains(ips, a.PrivateIP) {
			a.AssociationID, a.ENI, a.PrivateIP = "", "", ""
		}
	}
}
